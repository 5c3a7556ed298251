//! The row cache: rows scheduled, copied from a row source by the refresher,
//! removed when unscheduled or gone, kept when the source fails, and never
//! refreshed by two refreshers at once.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use redis::AsyncCommands;
use shop_cache::domain::ItemId;
use shop_cache::row_cache::{
    RETRY_BACKOFF, RefreshStep, Refresher, RowCache, RowSource, ScheduledRow, SourceError,
};
use tokio_util::sync::CancellationToken;

use crate::{Fixture, both_layouts};

fn item(n: u64) -> ItemId {
    ItemId::new(n).unwrap()
}

fn now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

/// A row as the source gives it.
fn json(row: ItemId, stock: i64) -> String {
    format!("{{\"item_id\":{row},\"stock\":{stock}}}")
}

/// An in-memory table as the row source: each row's stock, a switch that makes every
/// read fail (the database going away), and how often each row was read.
#[derive(Clone, Default)]
struct Table(Arc<Mutex<TableState>>);

#[derive(Default)]
struct TableState {
    stock: HashMap<ItemId, i64>,
    failing: bool,
    loads: HashMap<ItemId, u32>,
}

impl Table {
    /// Rows 1..=n, row i with stock 10 i.
    fn with_rows(n: u64) -> Self {
        let table = Self::default();
        for i in 1..=n {
            table.set_stock(item(i), 10 * i as i64);
        }
        table
    }

    fn set_stock(&self, row: ItemId, stock: i64) {
        self.0.lock().unwrap().stock.insert(row, stock);
    }

    fn delete(&self, row: ItemId) {
        self.0.lock().unwrap().stock.remove(&row);
    }

    fn fail(&self, failing: bool) {
        self.0.lock().unwrap().failing = failing;
    }

    fn loads(&self, row: ItemId) -> u32 {
        self.0.lock().unwrap().loads.get(&row).copied().unwrap_or(0)
    }

    fn load(&self, row: ItemId) -> Result<Option<String>, SourceError> {
        let mut t = self.0.lock().unwrap();
        *t.loads.entry(row).or_default() += 1;
        if t.failing {
            return Err("the database is unreachable".into());
        }
        Ok(t.stock.get(&row).map(|&stock| json(row, stock)))
    }

    /// The table as a [`RowSource`]: a closure returning a future.
    fn source(&self) -> impl RowSource + 'static {
        let table = self.clone();
        move |row: ItemId| {
            let read = table.load(row);
            async move { read }
        }
    }
}

/// The reads of a source that takes a few milliseconds per row: which rows are
/// being read now, which were read by two at once, and how often each was read.
#[derive(Default)]
struct Reads {
    in_flight: Mutex<HashSet<ItemId>>,
    overlaps: Mutex<Vec<ItemId>>,
    done: Mutex<HashMap<ItemId, u32>>,
}

impl Reads {
    fn source(self: &Arc<Self>) -> impl RowSource + 'static {
        let reads = self.clone();
        move |row: ItemId| {
            let reads = reads.clone();
            async move {
                if !reads.in_flight.lock().unwrap().insert(row) {
                    reads.overlaps.lock().unwrap().push(row);
                }
                tokio::time::sleep(Duration::from_millis(3)).await;
                reads.in_flight.lock().unwrap().remove(&row);
                *reads.done.lock().unwrap().entry(row).or_default() += 1;
                Ok(Some(json(row, 0)))
            }
        }
    }
}

fn refresher(fx: &Fixture, table: &Table) -> Refresher<impl RowSource + 'static> {
    Refresher::new(fx.conn.clone(), fx.keys.clone(), table.source())
}

/// Steps until something other than `Idle` happens, for at most `within`.
async fn next_outcome<S: RowSource>(r: &Refresher<S>, within: Duration) -> RefreshStep {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        match r.step().await.unwrap() {
            RefreshStep::Idle(_) => {
                assert!(tokio::time::Instant::now() < deadline, "nothing came due");
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            other => return other,
        }
    }
}

both_layouts! {
async fn a_scheduled_row_is_copied_from_the_source_and_rescheduled(fx: Fixture) {
    let rows = RowCache::new(fx.conn.clone(), fx.keys.clone());
    let table = Table::with_rows(10);
    let refresher = refresher(&fx, &table);
    assert!(rows.list().await.unwrap().is_empty());
    assert_eq!(refresher.step().await.unwrap(), RefreshStep::Idle(None));

    rows.schedule(item(7), 60.0).await.unwrap();
    let listed = rows.list().await.unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!((listed[0].row, listed[0].delay), (item(7), Some(60.0)));
    assert!(
        (listed[0].next_at - now()).abs() < 2.0,
        "due now: {listed:?}"
    );
    assert_eq!(rows.get(item(7)).await.unwrap(), None, "not copied yet");

    assert_eq!(
        refresher.step().await.unwrap(),
        RefreshStep::Refreshed(item(7))
    );
    assert_eq!(rows.get(item(7)).await.unwrap(), Some(json(item(7), 70)));
    assert_eq!(table.loads(item(7)), 1);
    let listed = rows.list().await.unwrap();
    assert!(
        (listed[0].next_at - (now() + 60.0)).abs() < 2.0,
        "due again in 60 s: {listed:?}"
    );
    match refresher.step().await.unwrap() {
        RefreshStep::Idle(Some(next)) => {
            assert!(
                next > Duration::from_secs(55) && next <= Duration::from_secs(60),
                "{next:?}"
            )
        }
        other => panic!("nothing is due: {other:?}"),
    }
    assert_eq!(table.loads(item(7)), 1);
    let mut expected = vec![
        fx.keys.schedule().to_owned(),
        fx.keys.delay().to_owned(),
        fx.keys.inventory(item(7)),
    ];
    expected.sort();
    assert_eq!(fx.all_keys().await, expected);

    // The row changes in the source; made due again, the copy follows.
    table.set_stock(item(7), 12_345);
    rows.schedule(item(7), 60.0).await.unwrap();
    assert_eq!(
        refresher.step().await.unwrap(),
        RefreshStep::Refreshed(item(7))
    );
    assert_eq!(
        rows.get(item(7)).await.unwrap(),
        Some(json(item(7), 12_345))
    );
}

async fn unscheduling_removes_the_row_and_its_copy(fx: Fixture) {
    let rows = RowCache::new(fx.conn.clone(), fx.keys.clone());
    let table = Table::with_rows(10);
    let refresher = refresher(&fx, &table);
    rows.schedule(item(3), 60.0).await.unwrap();
    assert_eq!(
        refresher.step().await.unwrap(),
        RefreshStep::Refreshed(item(3))
    );
    assert!(rows.get(item(3)).await.unwrap().is_some());

    // The book's way: delay -1, due now; the refresher removes it without reading.
    rows.unschedule(item(3)).await.unwrap();
    let listed = rows.list().await.unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].delay, Some(-1.0));
    assert_eq!(
        refresher.step().await.unwrap(),
        RefreshStep::Removed(item(3))
    );
    assert_eq!(
        table.loads(item(3)),
        1,
        "the source is not read for a removal"
    );
    assert_eq!(rows.get(item(3)).await.unwrap(), None);
    assert!(rows.list().await.unwrap().is_empty());
    assert_eq!(rows.lag().await.unwrap(), None);
    assert!(fx.all_keys().await.is_empty(), "{:?}", fx.all_keys().await);
    assert_eq!(refresher.step().await.unwrap(), RefreshStep::Idle(None));

    // A delay of 0 stops caching too, before the row was ever copied.
    rows.schedule(item(4), 0.0).await.unwrap();
    assert_eq!(
        refresher.step().await.unwrap(),
        RefreshStep::Removed(item(4))
    );
    assert_eq!(table.loads(item(4)), 0);
    assert!(fx.all_keys().await.is_empty());

    // A row in schedule: with no delay at all (and a stale copy) is removed too.
    let mut raw = fx.raw().await;
    let _: () = raw.zadd(fx.keys.schedule(), 9, 0).await.unwrap();
    let _: () = raw.set(fx.keys.inventory(item(9)), "{}").await.unwrap();
    let listed = rows.list().await.unwrap();
    assert_eq!(
        listed,
        vec![ScheduledRow {
            row: item(9),
            delay: None,
            next_at: 0.0
        }]
    );
    assert_eq!(
        refresher.step().await.unwrap(),
        RefreshStep::Removed(item(9))
    );
    assert_eq!(table.loads(item(9)), 0);
    assert!(fx.all_keys().await.is_empty(), "{:?}", fx.all_keys().await);
}

async fn a_row_the_source_no_longer_has_leaves_the_cache(fx: Fixture) {
    let rows = RowCache::new(fx.conn.clone(), fx.keys.clone());
    let table = Table::with_rows(5);
    let refresher = refresher(&fx, &table);
    rows.schedule(item(2), 60.0).await.unwrap();
    assert_eq!(
        refresher.step().await.unwrap(),
        RefreshStep::Refreshed(item(2))
    );
    table.delete(item(2));
    rows.schedule(item(2), 60.0).await.unwrap();
    assert_eq!(
        refresher.step().await.unwrap(),
        RefreshStep::Removed(item(2))
    );
    assert_eq!(rows.get(item(2)).await.unwrap(), None);
    assert!(rows.list().await.unwrap().is_empty());
    assert!(fx.all_keys().await.is_empty());
}

async fn a_source_error_keeps_the_old_copy_and_retries_after_a_back_off(fx: Fixture) {
    let rows = RowCache::new(fx.conn.clone(), fx.keys.clone());
    let table = Table::with_rows(5);
    let refresher = refresher(&fx, &table);
    rows.schedule(item(2), 0.05).await.unwrap();
    assert_eq!(
        refresher.step().await.unwrap(),
        RefreshStep::Refreshed(item(2))
    );
    let before = rows.get(item(2)).await.unwrap().unwrap();

    table.fail(true);
    table.set_stock(item(2), 77);
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(
        refresher.step().await.unwrap(),
        RefreshStep::Failed(item(2))
    );
    let failed_at = tokio::time::Instant::now();
    assert_eq!(rows.get(item(2)).await.unwrap(), Some(before));
    let listed = rows.list().await.unwrap();
    assert_eq!(listed.len(), 1, "still scheduled");
    assert_eq!(listed[0].delay, Some(0.05), "with its delay");
    let backoff = RETRY_BACKOFF.as_secs_f64();
    let due_in = listed[0].next_at - now();
    assert!(
        due_in > backoff - 1.0 && due_in <= backoff,
        "retried in {due_in} s"
    );
    assert!(
        matches!(refresher.step().await.unwrap(), RefreshStep::Idle(Some(_))),
        "not retried before the back-off"
    );

    // The source is back: the row is retried after the back-off and refreshed.
    table.fail(false);
    let outcome = next_outcome(&refresher, RETRY_BACKOFF * 3).await;
    assert_eq!(outcome, RefreshStep::Refreshed(item(2)));
    assert!(failed_at.elapsed() > RETRY_BACKOFF - Duration::from_millis(500));
    assert_eq!(rows.get(item(2)).await.unwrap(), Some(json(item(2), 77)));
    assert_eq!(rows.list().await.unwrap()[0].delay, Some(0.05));
}

async fn lag_is_how_overdue_the_most_overdue_row_is(fx: Fixture) {
    let rows = RowCache::new(fx.conn.clone(), fx.keys.clone());
    let table = Table::with_rows(5);
    let refresher = refresher(&fx, &table);
    assert_eq!(rows.lag().await.unwrap(), None, "nothing scheduled");
    rows.schedule(item(1), 60.0).await.unwrap();
    rows.schedule(item(2), 60.0).await.unwrap();
    let lag = rows.lag().await.unwrap().unwrap();
    assert!((0.0..2.0).contains(&lag), "due just now: {lag}");

    // Refreshers that fell behind: one row due 30 s ago, the other 10 s ago.
    let mut raw = fx.raw().await;
    let _: () = raw.zadd(fx.keys.schedule(), 1, now() - 30.0).await.unwrap();
    let _: () = raw.zadd(fx.keys.schedule(), 2, now() - 10.0).await.unwrap();
    let lag = rows.lag().await.unwrap().unwrap();
    assert!((29.0..32.0).contains(&lag), "the most overdue: {lag}");

    // Caught up: nothing is overdue.
    assert_eq!(
        refresher.step().await.unwrap(),
        RefreshStep::Refreshed(item(1))
    );
    let lag = rows.lag().await.unwrap().unwrap();
    assert!((9.0..12.0).contains(&lag), "{lag}");
    assert_eq!(
        refresher.step().await.unwrap(),
        RefreshStep::Refreshed(item(2))
    );
    assert_eq!(rows.lag().await.unwrap(), Some(0.0));
}

async fn list_shows_every_row_soonest_due_first(fx: Fixture) {
    let rows = RowCache::new(fx.conn.clone(), fx.keys.clone());
    let table = Table::with_rows(5);
    let refresher = refresher(&fx, &table);
    for (row, delay) in [(1, 30.0), (2, 10.0), (3, 20.0)] {
        rows.schedule(item(row), delay).await.unwrap();
    }
    for _ in 0..3 {
        assert!(matches!(
            refresher.step().await.unwrap(),
            RefreshStep::Refreshed(_)
        ));
    }
    rows.schedule(item(4), 5.0).await.unwrap();
    let listed = rows.list().await.unwrap();
    let order: Vec<(u64, Option<f64>)> =
        listed.iter().map(|r| (r.row.get(), r.delay)).collect();
    assert_eq!(
        order,
        vec![
            (4, Some(5.0)),
            (2, Some(10.0)),
            (3, Some(20.0)),
            (1, Some(30.0))
        ]
    );
    let t = now();
    for (r, due_in) in listed.iter().zip([0.0, 10.0, 20.0, 30.0]) {
        assert!((r.next_at - (t + due_in)).abs() < 2.0, "{r:?}");
    }
}

async fn the_delay_as_it_is_when_the_read_ends_decides(fx: Fixture) {
    // While a refresher reads a row, the row is unscheduled, or its delay changed:
    // the refresher's finish follows what is in Redis by then.
    let rows = RowCache::new(fx.conn.clone(), fx.keys.clone());
    let during_read = rows.clone();
    let source = move |row: ItemId| {
        let rows = during_read.clone();
        async move {
            match row.get() {
                1 => rows.unschedule(row).await?,
                _ => rows.schedule(row, 5.0).await?,
            }
            Ok::<_, SourceError>(Some(json(row, 1)))
        }
    };
    let refresher = Refresher::new(fx.conn.clone(), fx.keys.clone(), source);
    rows.schedule(item(1), 60.0).await.unwrap();
    assert_eq!(
        refresher.step().await.unwrap(),
        RefreshStep::Removed(item(1))
    );
    assert_eq!(rows.get(item(1)).await.unwrap(), None);
    assert!(fx.all_keys().await.is_empty(), "{:?}", fx.all_keys().await);

    rows.schedule(item(2), 60.0).await.unwrap();
    assert_eq!(
        refresher.step().await.unwrap(),
        RefreshStep::Refreshed(item(2))
    );
    let listed = rows.list().await.unwrap();
    assert_eq!(listed[0].delay, Some(5.0));
    assert!(
        (listed[0].next_at - (now() + 5.0)).abs() < 2.0,
        "{listed:?}"
    );
}

async fn a_row_scheduled_again_after_an_unscheduled_claim_stays(fx: Fixture) {
    // The claim finds the row unscheduled; before the removal, it is scheduled
    // again: the removal leaves it (the refresher's 'unscheduled' finish, here
    // driven by hand, as the refresher makes the calls with nothing in between).
    use shop_cache::scripts::{CLAIM_ROW, FINISH_ROW};
    let rows = RowCache::new(fx.conn.clone(), fx.keys.clone());
    rows.unschedule(item(6)).await.unwrap();
    let mut raw = fx.raw().await;
    let claimed: Vec<String> = CLAIM_ROW
        .key(fx.keys.schedule())
        .key(fx.keys.delay())
        .arg(30)
        .arg(1)
        .invoke_async(&mut raw)
        .await
        .unwrap();
    assert_eq!(claimed, vec!["claimed", "6", "0"]);
    rows.schedule(item(6), 60.0).await.unwrap();
    let kept: Vec<i64> = FINISH_ROW
        .key(fx.keys.schedule())
        .key(fx.keys.delay())
        .key(fx.keys.inventory(item(6)))
        .arg(6)
        .arg("unscheduled")
        .arg("")
        .invoke_async(&mut raw)
        .await
        .unwrap();
    assert_eq!(kept, vec![3], "scheduled again: kept");
    let listed = rows.list().await.unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].delay, Some(60.0));
    // And the refresher then copies it as usual.
    let table = Table::with_rows(6);
    assert_eq!(
        refresher(&fx, &table).step().await.unwrap(),
        RefreshStep::Refreshed(item(6))
    );
}

#[multi_thread]
async fn two_refreshers_over_300_rows_refresh_each_once(fx: Fixture) {
    const ROWS: u64 = 300;
    let rows = RowCache::new(fx.conn.clone(), fx.keys.clone());
    for n in 1..=ROWS {
        rows.schedule(item(n), 60.0).await.unwrap();
    }
    let table = Table::with_rows(ROWS);
    let run = |r: Refresher<_>| async move {
        let mut refreshed = 0;
        loop {
            match r.step().await.unwrap() {
                RefreshStep::Refreshed(_) => refreshed += 1,
                RefreshStep::Idle(_) => return refreshed,
                other => panic!("unexpected {other:?}"),
            }
        }
    };
    let (a, b) = tokio::join!(
        tokio::spawn(run(refresher(&fx, &table))),
        tokio::spawn(run(refresher(&fx, &table)))
    );
    let (a, b) = (a.unwrap(), b.unwrap());
    assert_eq!(a + b, ROWS, "{a} + {b}");
    assert!(a > 0 && b > 0, "both refreshers worked ({a}, {b})");
    for n in 1..=ROWS {
        assert_eq!(table.loads(item(n)), 1, "row {n} read once");
        assert_eq!(
            rows.get(item(n)).await.unwrap(),
            Some(json(item(n), 10 * n as i64))
        );
    }
    // schedule: lost nothing: every row is due again in about 60 s.
    let listed = rows.list().await.unwrap();
    assert_eq!(listed.len(), ROWS as usize);
    let t = now();
    assert!(
        listed
            .iter()
            .all(|r| r.next_at > t + 50.0 && r.delay == Some(60.0))
    );
}

#[multi_thread]
async fn two_refreshers_never_read_the_same_row_at_once(fx: Fixture) {
    // Rows due again every 20 ms, each read taking a few milliseconds: the two
    // refreshers keep finding due rows, and must never both be reading one.
    const ROWS: u64 = 10;
    let rows = RowCache::new(fx.conn.clone(), fx.keys.clone());
    for n in 1..=ROWS {
        rows.schedule(item(n), 0.02).await.unwrap();
    }
    let reads: Arc<Reads> = Arc::default();
    let stop = CancellationToken::new();
    let run = |r: Refresher<_>, stop: CancellationToken| async move {
        let mut refreshed = 0;
        while !stop.is_cancelled() {
            match r.step().await.unwrap() {
                RefreshStep::Refreshed(_) => refreshed += 1,
                RefreshStep::Idle(_) => tokio::task::yield_now().await,
                other => panic!("unexpected {other:?}"),
            }
        }
        refreshed
    };
    let a = tokio::spawn(run(
        Refresher::new(fx.conn.clone(), fx.keys.clone(), reads.source()),
        stop.clone(),
    ));
    let b = tokio::spawn(run(
        Refresher::new(fx.conn.clone(), fx.keys.clone(), reads.source()),
        stop.clone(),
    ));
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    stop.cancel();
    let (a, b) = (a.await.unwrap(), b.await.unwrap());
    assert!(a > 0 && b > 0, "both refreshers worked ({a}, {b})");
    let overlaps = reads.overlaps.lock().unwrap().clone();
    assert!(overlaps.is_empty(), "read by both at once: {overlaps:?}");
    let done = reads.done.lock().unwrap().clone();
    assert_eq!(done.len(), ROWS as usize, "every row refreshed");
    assert!(
        done.values().all(|&n| n > 1),
        "each refreshed again and again: {done:?}"
    );
    assert_eq!(done.values().sum::<u32>(), a + b);
    assert_eq!(rows.list().await.unwrap().len(), ROWS as usize, "none lost");
}

async fn the_daemon_keeps_a_row_fresh_and_drops_it_when_unscheduled(fx: Fixture) {
    let rows = RowCache::new(fx.conn.clone(), fx.keys.clone());
    let table = Table::with_rows(10);
    rows.schedule(item(7), 0.1).await.unwrap();
    let shutdown = CancellationToken::new();
    let task = tokio::spawn(shop_cache::daemon::run(
        refresher(&fx, &table),
        shutdown.clone(),
    ));
    let wait_for = |want: Option<String>| {
        let rows = rows.clone();
        async move {
            let started = tokio::time::Instant::now();
            loop {
                let got = rows.get(item(7)).await.unwrap();
                if got == want {
                    return;
                }
                assert!(
                    started.elapsed() < Duration::from_secs(3),
                    "{got:?}, not {want:?}"
                );
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    };
    wait_for(Some(json(item(7), 70))).await;
    table.set_stock(item(7), 12_345);
    wait_for(Some(json(item(7), 12_345))).await;
    rows.unschedule(item(7)).await.unwrap();
    wait_for(None).await;
    shutdown.cancel();
    task.await.unwrap();
    assert!(fx.all_keys().await.is_empty(), "{:?}", fx.all_keys().await);
}
}

both_layouts! {
#[multi_thread]
async fn two_batch_refreshers_over_300_rows_refresh_each_once(fx: Fixture) {
    const ROWS: u64 = 300;
    let rows = RowCache::new(fx.conn.clone(), fx.keys.clone());
    for n in 1..=ROWS {
        rows.schedule(item(n), 60.0).await.unwrap();
    }
    let table = Table::with_rows(ROWS);
    let run = |r: Refresher<_>| async move {
        let mut refreshed = 0;
        loop {
            let done = r.step_batch().await.unwrap();
            assert_eq!((done.removed, done.failed), (0, 0), "{done:?}");
            refreshed += done.refreshed;
            if done.idle.is_some() {
                return refreshed;
            }
        }
    };
    let (a, b) = tokio::join!(
        tokio::spawn(run(refresher(&fx, &table).with_batch(32))),
        tokio::spawn(run(refresher(&fx, &table).with_batch(32)))
    );
    let (a, b) = (a.unwrap(), b.unwrap());
    assert_eq!(a + b, ROWS, "{a} + {b}");
    for n in 1..=ROWS {
        assert_eq!(table.loads(item(n)), 1, "row {n} read once");
        assert_eq!(
            rows.get(item(n)).await.unwrap(),
            Some(json(item(n), 10 * n as i64))
        );
    }
    let listed = rows.list().await.unwrap();
    assert_eq!(listed.len(), ROWS as usize, "schedule: lost nothing");
    let t = now();
    assert!(listed.iter().all(|r| r.next_at > t + 50.0 && r.delay == Some(60.0)));
}

async fn one_refresher_with_batches_in_flight_refreshes_each_row_once(fx: Fixture) {
    const ROWS: u64 = 300;
    let rows = RowCache::new(fx.conn.clone(), fx.keys.clone());
    for n in 1..=ROWS {
        rows.schedule(item(n), 60.0).await.unwrap();
    }
    let table = Table::with_rows(ROWS);
    let mut r = refresher(&fx, &table).with_batch(32).with_in_flight(3);
    let mut refreshed = 0;
    // Until every row is refreshed and an idle batch came back (the others under
    // way end at the finish).
    loop {
        let done = r.step_overlapped().await.unwrap();
        assert_eq!((done.removed, done.failed), (0, 0), "{done:?}");
        refreshed += done.refreshed;
        // Idle: the next row due is one another batch holds (a lease ahead) or
        // one refreshed (a delay ahead).
        if let Some(next) = done.idle {
            assert!(next.is_some(), "rows are scheduled");
            if refreshed == ROWS {
                break;
            }
        }
    }
    r.finish_batches().await;
    assert_eq!(refreshed, ROWS);
    let t = now();
    let listed = rows.list().await.unwrap();
    assert_eq!(listed.len(), ROWS as usize, "schedule: lost nothing");
    assert!(listed.iter().all(|r| r.next_at > t + 50.0 && r.delay == Some(60.0)));
    for n in 1..=ROWS {
        assert_eq!(table.loads(item(n)), 1, "row {n} read once");
        assert_eq!(
            rows.get(item(n)).await.unwrap(),
            Some(json(item(n), 10 * n as i64))
        );
    }
}

async fn a_batch_stores_removes_and_keeps_as_each_row_needs(fx: Fixture) {
    let rows = RowCache::new(fx.conn.clone(), fx.keys.clone());
    for n in 1..=10 {
        rows.schedule(item(n), 60.0).await.unwrap();
    }
    let table = Table::with_rows(10);
    let refresher = refresher(&fx, &table).with_batch(100);
    // A first pass stores all ten.
    let done = refresher.step_batch().await.unwrap();
    assert_eq!((done.refreshed, done.removed, done.failed), (10, 0, 0));
    // Then: row 3 unscheduled (delay 0), row 5 gone from the table, row 9's delay
    // missing altogether (the book's crash), and all due again.
    rows.unschedule(item(3)).await.unwrap();
    let _: () = fx.raw().await.zadd(fx.keys.schedule(), 3, 0).await.unwrap();
    table.delete(item(5));
    let mut raw = fx.raw().await;
    let _: () = raw.zrem(fx.keys.delay(), 9).await.unwrap();
    for n in 1..=10u64 {
        let _: () = raw.zadd(fx.keys.schedule(), n, 0).await.unwrap();
    }
    let done = refresher.step_batch().await.unwrap();
    assert_eq!((done.refreshed, done.removed, done.failed), (7, 3, 0), "{done:?}");
    for n in 1..=10 {
        let kept = rows.get(item(n)).await.unwrap();
        assert_eq!(kept.is_some(), ![3, 5, 9].contains(&n), "row {n}");
    }
    // The source failing: every copy kept, every row retried after the back-off.
    for n in [1u64, 2, 4, 6, 7, 8, 10] {
        let _: () = raw.zadd(fx.keys.schedule(), n, 0).await.unwrap();
    }
    table.fail(true);
    let done = refresher.step_batch().await.unwrap();
    assert_eq!((done.refreshed, done.removed, done.failed), (0, 0, 7), "{done:?}");
    for n in [1, 2, 4, 6, 7, 8, 10] {
        assert!(rows.get(item(n)).await.unwrap().is_some(), "row {n} kept");
    }
    let listed = rows.list().await.unwrap();
    let t = now();
    assert!(listed.iter().all(|r| r.next_at > t + RETRY_BACKOFF.as_secs_f64() / 2.0), "{listed:?}");
}
}
