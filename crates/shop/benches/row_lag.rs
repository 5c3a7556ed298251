//! The row refresher at the seeds' scale: 100,000 rows scheduled at a 1 s delay
//! (every item's row refreshed every second), one refresher running the daemon's
//! step (`step_overlapped`: `IN_FLIGHT` batches at once, the daemon's default
//! unless set) in a loop as `shop work` does, for 20 s after a 5 s warm-up, with a
//! batch of 100 and of 500. Two measures of the lag from due to fresh:
//! - **per refresh**: every row read is timed (the refresher's source is the
//!   database behind a timer); a row is due its delay after its last refresh was
//!   stored, so the time between two reads of a row, less the delay, is how late
//!   the second refresh came (up to the difference between the two stores'
//!   latencies, about a millisecond): p50, p99 and max over every refresh in the run;
//! - **the most overdue row** (`RowCache::lag`: now minus the earliest due time in
//!   `schedule:`), sampled every 10 ms: the upper envelope of the above, p99 over
//!   the samples (the time the oldest waiting row was that late, not the share of
//!   refreshes).
//!
//! Each batch size runs twice: the rows' first due times spread evenly over a second
//! (as a shop's rows come to be cached), and all at once when the refresher starts
//! (a herd; see [`Start`]); `START=spread` or `START=herd` runs one. Against a
//! private redis-server and a seeded SQLite file. `REFRESHERS=2` runs two
//! refreshers side by side (safe: they never take the same row). `ORDER=scattered`
//! schedules the rows in an order far from their ids' (see [`first_order`]).
//! Run: `cargo bench -p shop --bench row_lag` (about two minutes).

#![allow(missing_docs)]

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use shop_app::rows::DbRows;
use shop_cache::domain::ItemId;
use shop_cache::keys::Keys;
use shop_cache::row_cache::{Refresher, RowCache, RowSource, SourceError};
use shop_db::Db;
use shop_testkit::{TestDb, TestRedis};

const ROWS: u64 = 100_000;
const WARM_UP: Duration = Duration::from_secs(5);
const RUN: Duration = Duration::from_secs(20);
/// Every row's delay.
const DELAY: f64 = 1.0;

/// The database as the refresher reads it, each row's reads timed (see the module
/// docs).
#[derive(Clone)]
struct Timed {
    db: DbRows,
    reads: Arc<Mutex<Reads>>,
}

#[derive(Default)]
struct Reads {
    /// When each row was last read.
    last: HashMap<ItemId, Instant>,
    /// While measuring: each refresh's lag after its due time, in seconds.
    lags: Option<Vec<f32>>,
}

impl RowSource for Timed {
    async fn load(&self, row: ItemId) -> Result<Option<String>, SourceError> {
        let found = self.db.load(row).await?;
        self.read(&[row]);
        Ok(found)
    }

    async fn load_many(&self, rows: &[ItemId]) -> Result<HashMap<ItemId, String>, SourceError> {
        let found = self.db.load_many(rows).await?;
        self.read(rows);
        Ok(found)
    }
}

impl Timed {
    fn read(&self, rows: &[ItemId]) {
        let now = Instant::now();
        let mut reads = self.reads.lock().unwrap();
        let Reads { last, lags } = &mut *reads;
        for &row in rows {
            if let (Some(before), Some(lags)) = (last.insert(row, now), lags.as_mut()) {
                lags.push(((now - before).as_secs_f64() - DELAY) as f32);
            }
        }
    }
}

fn main() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let test_db = TestDb::sqlite();
        let db = Db::connect(test_db.url()).await.unwrap();
        db.seed(ROWS, 1, &|_| {}).await.unwrap();
        let starts = match std::env::var("START").as_deref() {
            Ok("spread") => vec![Start::Spread],
            Ok("herd") => vec![Start::Herd],
            _ => vec![Start::Spread, Start::Herd],
        };
        for start in starts {
            for batch in [100, 500] {
                run(&db, batch, start).await;
            }
        }
    });
}

/// How the rows are first scheduled.
#[derive(Clone, Copy, PartialEq, Debug)]
enum Start {
    /// Due evenly over a second, as rows come to be cached one by one (scheduled
    /// with the refresher running).
    Spread,
    /// All due at once when the refresher starts (a herd: a shop's first start
    /// with a full schedule, or the refresher back after an outage): it works
    /// through them at its top speed, which packs their next due times as tight,
    /// and every second after they come due that fast again.
    Herd,
}

/// The order the rows are first scheduled in, which the refresher keeps: by id
/// (the default), or with `ORDER=scattered` ids far apart one after another (as a
/// shop's rows come to be cached in the order items are viewed), so each batch
/// reads rows from all over the table.
fn first_order() -> Vec<u64> {
    if std::env::var("ORDER").as_deref() == Ok("scattered") {
        // 7,919 is prime and no factor of 100,000: every row once.
        (0..ROWS).map(|n| n * 7_919 % ROWS + 1).collect()
    } else {
        (1..=ROWS).collect()
    }
}

/// Spread over a second: a thousand rows each tick.
const SPREAD_TICK: Duration = Duration::from_millis(10);

async fn run(db: &Db, batch: usize, start: Start) {
    let server = TestRedis::start();
    let conn = shop_cache::connect(&server.url()).await.unwrap();
    let rows = RowCache::new(conn.clone(), Keys::default());
    let refreshers: usize = std::env::var("REFRESHERS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(1);
    let in_flight: usize = std::env::var("IN_FLIGHT")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(shop_cache::row_cache::DEFAULT_IN_FLIGHT);
    // A herd is scheduled before the refresher starts; a spread with it running,
    // a thousand rows every 10 ms.
    let schedule = async |start: Start| {
        let began = Instant::now();
        for (tick, chunk) in first_order().chunks(1_000).enumerate() {
            if start == Start::Spread {
                tokio::time::sleep_until((began + SPREAD_TICK * tick as u32).into()).await;
            }
            let calls = chunk
                .iter()
                .map(|&n| rows.schedule(ItemId::new(n).unwrap(), DELAY));
            futures::future::try_join_all(calls).await.unwrap();
        }
    };
    if start == Start::Herd {
        schedule(start).await;
    }
    let timed = Timed {
        db: shop_app::rows::row_source(db.clone()),
        reads: Arc::default(),
    };
    let stop = Arc::new(AtomicBool::new(false));
    let refreshed = Arc::new(AtomicU64::new(0));
    let workers: Vec<_> = (0..refreshers)
        .map(|_| {
            let mut refresher = Refresher::new(conn.clone(), Keys::default(), timed.clone())
                .with_batch(batch)
                .with_in_flight(in_flight);
            let (stop, refreshed) = (stop.clone(), refreshed.clone());
            tokio::spawn(async move {
                while !stop.load(Ordering::Relaxed) {
                    let done = refresher.step_overlapped().await.unwrap();
                    refreshed.fetch_add(done.refreshed, Ordering::Relaxed);
                    if let Some(next) = done.idle {
                        let pause = next.map_or(shop_cache::row_cache::IDLE_POLL, |n| {
                            n.min(shop_cache::row_cache::IDLE_POLL)
                        });
                        tokio::time::sleep(pause).await;
                    }
                }
            })
        })
        .collect();
    if start == Start::Spread {
        schedule(start).await;
    }
    tokio::time::sleep(WARM_UP).await;
    timed.reads.lock().unwrap().lags = Some(Vec::new());
    let measuring = Instant::now();
    let before = refreshed.load(Ordering::Relaxed);
    let mut lags = Vec::new();
    while measuring.elapsed() < RUN {
        lags.push(rows.lag().await.unwrap().unwrap_or(0.0));
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let rate =
        (refreshed.load(Ordering::Relaxed) - before) as f64 / measuring.elapsed().as_secs_f64();
    let mut per_refresh = timed.reads.lock().unwrap().lags.take().unwrap();
    stop.store(true, Ordering::Relaxed);
    for worker in workers {
        worker.await.unwrap();
    }
    lags.sort_by(f64::total_cmp);
    per_refresh.sort_by(f32::total_cmp);
    // Under zero (the refresh before took longer to store than this one): on time.
    let ms = |lags: &[f64], p: f64| {
        lags[((lags.len() as f64 * p) as usize).min(lags.len() - 1)].max(0.0) * 1e3
    };
    let per_refresh: Vec<f64> = per_refresh.into_iter().map(f64::from).collect();
    println!(
        "{start:?}, batch {batch}: {ROWS} rows at a {DELAY} s delay, {refreshers} refresher(s), {in_flight} batch(es) in flight each: {rate:.0} rows/s refreshed
   lag per refresh, {} refreshes: p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms
   lag of the most overdue row, {} samples: p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms",
        per_refresh.len(),
        ms(&per_refresh, 0.5),
        ms(&per_refresh, 0.99),
        ms(&per_refresh, 1.0),
        lags.len(),
        ms(&lags, 0.5),
        ms(&lags, 0.99),
        ms(&lags, 1.0)
    );
}
