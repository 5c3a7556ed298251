//! The row cache over the real database: the book's scenario, many refreshers, and
//! the database going away.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use redis::AsyncCommands;
use shop_cache::domain::ItemId;
use shop_cache::keys::Keys;
use shop_cache::row_cache::{RefreshStep, Refresher, RowCache, RowSource};
use shop_db::Db;
use shop_testkit::{TestDb, TestRedis};
use tokio_util::sync::CancellationToken;

fn item(n: u64) -> ItemId {
    ItemId::new(n).unwrap()
}

struct Setup {
    redis: TestRedis,
    rows: RowCache,
    conn: shop_cache::RedisConn,
}

async fn setup() -> Setup {
    let redis = TestRedis::start();
    let conn = shop_cache::connect(&redis.url()).await.unwrap();
    Setup {
        rows: RowCache::new(conn.clone(), Keys::default()),
        conn,
        redis,
    }
}

async fn seeded(items: u64) -> Vec<(TestDb, Db)> {
    let mut out = Vec::new();
    for test_db in TestDb::all().await {
        let db = Db::connect(test_db.url()).await.unwrap();
        db.seed(items, 1, &|_| {}).await.unwrap();
        out.push((test_db, db));
    }
    out
}

/// A refresher over the test's Redis and `db`.
fn refresher_over(
    s: &Setup,
    db: &Db,
) -> Refresher<impl shop_cache::row_cache::RowSource + 'static> {
    Refresher::new(
        s.conn.clone(),
        Keys::default(),
        shop_app::rows::row_source(db.clone()),
    )
}

fn stock_of(json: &str) -> i64 {
    let row: serde_json::Value = serde_json::from_str(json).unwrap();
    row["stock"].as_i64().unwrap()
}

#[tokio::test]
async fn the_books_scenario() {
    for (test_db, db) in seeded(20).await {
        let kind = test_db.kind();
        let s = setup().await;
        let refresher = refresher_over(&s, &db);

        // Schedule with delay 1: the row appears.
        s.rows.schedule(item(7), 1.0).await.unwrap();
        assert_eq!(
            refresher.step().await.unwrap(),
            RefreshStep::Refreshed(item(7)),
            "{kind}"
        );
        let first = s.rows.get(item(7)).await.unwrap().expect("inv:7 exists");
        assert!(first.contains("\"item_id\":7"), "{first}");
        assert!(first.contains("\"sale_start\":null"), "{first}");

        // Change the row in the database: the copy follows within about a second.
        db.set_stock(item(7), 12_345).await.unwrap();
        let shutdown = CancellationToken::new();
        let task = tokio::spawn(shop_cache::daemon::run(
            refresher_over(&s, &db),
            shutdown.clone(),
        ));
        let started = tokio::time::Instant::now();
        loop {
            let now = s.rows.get(item(7)).await.unwrap().unwrap();
            if stock_of(&now) == 12_345 {
                break;
            }
            assert!(
                started.elapsed() < Duration::from_secs(3),
                "{kind}: not refreshed: {now}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }

        // Delay -1: the copy disappears.
        s.rows.unschedule(item(7)).await.unwrap();
        let started = tokio::time::Instant::now();
        while s.rows.get(item(7)).await.unwrap().is_some() {
            assert!(
                started.elapsed() < Duration::from_secs(3),
                "{kind}: inv:7 still there"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        shutdown.cancel();
        task.await.unwrap();
        let mut raw = s.redis.conn().await;
        let left: Vec<String> = raw.keys("*").await.unwrap();
        assert!(left.is_empty(), "{kind}: {left:?}");

        // A row in schedule: with no delay at all is removed without error.
        let _: () = raw.zadd("schedule:", 9, 0).await.unwrap();
        let _: () = raw.set("inv:9", "{}").await.unwrap();
        assert_eq!(
            refresher.step().await.unwrap(),
            RefreshStep::Removed(item(9))
        );
        let left: Vec<String> = raw.keys("*").await.unwrap();
        assert!(left.is_empty(), "{kind}: {left:?}");
        assert_eq!(refresher.step().await.unwrap(), RefreshStep::Idle(None));
    }
}

#[tokio::test]
async fn a_row_deleted_from_the_database_leaves_the_cache() {
    let s = setup().await;
    let test_db = TestDb::sqlite();
    let db = Db::connect(test_db.url()).await.unwrap();
    let refresher = refresher_over(&s, &db);
    s.rows.schedule(item(3), 5.0).await.unwrap();
    assert_eq!(
        refresher.step().await.unwrap(),
        RefreshStep::Removed(item(3))
    );
    assert!(s.rows.list().await.unwrap().is_empty());
}

/// The database as a row source that counts how often each row is loaded.
fn counting_source(db: Db, loads: Arc<Mutex<HashMap<ItemId, u32>>>) -> impl RowSource + 'static {
    let inner = shop_app::rows::row_source(db);
    let inner = Arc::new(inner);
    move |row: ItemId| {
        *loads.lock().unwrap().entry(row).or_default() += 1;
        let inner = inner.clone();
        async move { inner.load(row).await }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_refreshers_over_1000_rows_refresh_each_once() {
    for (test_db, db) in seeded(1_000).await {
        let kind = test_db.kind();
        let s = setup().await;
        for n in 1..=1_000 {
            s.rows.schedule(item(n), 60.0).await.unwrap();
        }
        let loads: Arc<Mutex<HashMap<ItemId, u32>>> = Arc::default();
        let refresher = |loads: Arc<Mutex<HashMap<ItemId, u32>>>| {
            let counting = counting_source(db.clone(), loads);
            Refresher::new(s.conn.clone(), Keys::default(), counting)
        };
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
            tokio::spawn(run(refresher(loads.clone()))),
            tokio::spawn(run(refresher(loads.clone())))
        );
        let (a, b) = (a.unwrap(), b.unwrap());
        assert_eq!(a + b, 1_000, "{kind}: {a} + {b}");
        assert!(a > 0 && b > 0, "{kind}: both refreshers worked ({a}, {b})");
        let loads = loads.lock().unwrap().clone();
        assert_eq!(loads.len(), 1_000, "{kind}: every row refreshed");
        assert!(
            loads.values().all(|&n| n == 1),
            "{kind}: none refreshed twice"
        );
        // schedule: lost nothing: every row is due again in about 60 s.
        let listed = s.rows.list().await.unwrap();
        assert_eq!(listed.len(), 1_000, "{kind}");
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs_f64();
        assert!(
            listed
                .iter()
                .all(|r| r.next_at > now + 50.0 && r.delay == Some(60.0))
        );
    }
}

#[tokio::test]
async fn a_database_outage_keeps_the_old_copy_and_the_schedule() {
    for (test_db, db) in seeded(5).await {
        let kind = test_db.kind();
        let s = setup().await;
        let refresher = refresher_over(&s, &db);
        s.rows.schedule(item(2), 0.05).await.unwrap();
        assert_eq!(
            refresher.step().await.unwrap(),
            RefreshStep::Refreshed(item(2))
        );
        let before = s.rows.get(item(2)).await.unwrap().unwrap();

        db.close().await;
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(
            refresher.step().await.unwrap(),
            RefreshStep::Failed(item(2)),
            "{kind}"
        );
        assert_eq!(
            s.rows.get(item(2)).await.unwrap().as_deref(),
            Some(before.as_str())
        );
        let listed = s.rows.list().await.unwrap();
        assert_eq!(listed.len(), 1, "{kind}: still scheduled");
        assert_eq!(listed[0].delay, Some(0.05));

        // The database is back (a new pool, as after a restart): refreshing resumes.
        let db = Db::connect(test_db.url()).await.unwrap();
        db.set_stock(item(2), 77).await.unwrap();
        let refresher = refresher_over(&s, &db);
        let started = tokio::time::Instant::now();
        loop {
            match refresher.step().await.unwrap() {
                RefreshStep::Refreshed(_) => break,
                RefreshStep::Idle(_) => {
                    assert!(
                        started.elapsed() < Duration::from_secs(5),
                        "{kind}: never retried"
                    );
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                other => panic!("{kind}: {other:?}"),
            }
        }
        assert_eq!(stock_of(&s.rows.get(item(2)).await.unwrap().unwrap()), 77);
    }
}

/// The daemon's batch step over the real database: up to 600 rows claimed at once
/// and read in chunked `IN` queries (500 ids each), on every database; a row
/// deleted from the database leaves the cache in the same batch.
#[tokio::test]
async fn batches_of_rows_are_read_in_chunked_queries_and_stored() {
    for (test_db, db) in seeded(1_000).await {
        let kind = test_db.kind();
        let s = setup().await;
        for n in 1..=1_000 {
            s.rows.schedule(item(n), 60.0).await.unwrap();
        }
        let source = shop_app::rows::row_source(db.clone());
        let found = source
            .load_many(&(1..=600).map(item).collect::<Vec<_>>())
            .await
            .unwrap();
        assert_eq!(found.len(), 600, "{kind}");
        assert_eq!(
            found[&item(42)],
            db.inventory_json(item(42)).await.unwrap().unwrap(),
            "{kind}: the same JSON as one row's read"
        );
        let mut wanted: Vec<ItemId> = vec![item(5), item(99_999)];
        wanted.extend((700..=710).map(item));
        assert_eq!(
            source.load_many(&wanted).await.unwrap().len(),
            12,
            "{kind}: unknown ids are left out"
        );
        let refresher = refresher_over(&s, &db).with_batch(600);
        let first = refresher.step_batch().await.unwrap();
        assert_eq!(
            (first.refreshed, first.removed, first.failed),
            (600, 0, 0),
            "{kind}"
        );
        let second = refresher.step_batch().await.unwrap();
        assert_eq!(second.refreshed, 400, "{kind}");
        assert!(
            refresher.step_batch().await.unwrap().idle.is_some(),
            "{kind}"
        );
        for n in [1, 600, 601, 1_000] {
            assert_eq!(
                s.rows.get(item(n)).await.unwrap(),
                db.inventory_json(item(n)).await.unwrap(),
                "{kind}: row {n}"
            );
        }
    }
}
