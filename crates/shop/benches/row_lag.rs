//! The row refresher at the seeds' scale: 100,000 rows scheduled at a 1 s delay
//! (every item's row refreshed every second), one refresher running the daemon's
//! step (`step_overlapped`: `IN_FLIGHT` batches at once, the daemon's default
//! unless set) in a loop as `shop work` does, for 20 s after a 5 s warm-up, with a
//! batch of 100 and of 500. The lag of the most overdue row (`RowCache::lag`: now
//! minus the earliest due time in `schedule:`) is sampled every 10 ms: its p50,
//! p99 and max are how late a row can be from due to fresh. Against a private
//! redis-server and a seeded SQLite file. `REFRESHERS=2` runs two refreshers side
//! by side (safe: they never take the same row).
//! Run: `cargo bench -p shop --bench row_lag` (about a minute).

#![allow(missing_docs)]

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use shop_cache::domain::ItemId;
use shop_cache::keys::Keys;
use shop_cache::row_cache::{Refresher, RowCache};
use shop_db::Db;
use shop_testkit::{TestDb, TestRedis};

const ROWS: u64 = 100_000;
const WARM_UP: Duration = Duration::from_secs(5);
const RUN: Duration = Duration::from_secs(20);

fn main() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let test_db = TestDb::sqlite();
        let db = Db::connect(test_db.url()).await.unwrap();
        db.seed(ROWS, 1, &|_| {}).await.unwrap();
        for batch in [100, 500] {
            run(&db, batch).await;
        }
    });
}

async fn run(db: &Db, batch: usize) {
    let server = TestRedis::start();
    let conn = shop_cache::connect(&server.url()).await.unwrap();
    let rows = RowCache::new(conn.clone(), Keys::default());
    for chunk in (1..=ROWS).collect::<Vec<_>>().chunks(1_000) {
        let calls = chunk
            .iter()
            .map(|&n| rows.schedule(ItemId::new(n).unwrap(), 1.0));
        futures::future::try_join_all(calls).await.unwrap();
    }
    let refreshers: usize = std::env::var("REFRESHERS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(1);
    let in_flight: usize = std::env::var("IN_FLIGHT")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(shop_cache::row_cache::DEFAULT_IN_FLIGHT);
    let stop = Arc::new(AtomicBool::new(false));
    let refreshed = Arc::new(AtomicU64::new(0));
    let workers: Vec<_> = (0..refreshers)
        .map(|_| {
            let mut refresher = Refresher::new(
                conn.clone(),
                Keys::default(),
                shop_app::rows::row_source(db.clone()),
            )
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
    tokio::time::sleep(WARM_UP).await;
    let start = Instant::now();
    let before = refreshed.load(Ordering::Relaxed);
    let mut lags = Vec::new();
    while start.elapsed() < RUN {
        lags.push(rows.lag().await.unwrap().unwrap_or(0.0));
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let rate = (refreshed.load(Ordering::Relaxed) - before) as f64 / start.elapsed().as_secs_f64();
    stop.store(true, Ordering::Relaxed);
    for worker in workers {
        worker.await.unwrap();
    }
    lags.sort_by(f64::total_cmp);
    let at = |p: f64| lags[((lags.len() as f64 * p) as usize).min(lags.len() - 1)] * 1e3;
    println!(
        "batch {batch}: {ROWS} rows at a 1 s delay, {refreshers} refresher(s), {in_flight} batch(es) in flight each: {rate:.0} rows/s refreshed; lag of the most overdue row, {} samples: p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms",
        lags.len(),
        at(0.5),
        at(0.99),
        lags.last().unwrap() * 1e3
    );
}
