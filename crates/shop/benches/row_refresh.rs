#![allow(missing_docs)] // criterion_group! generates undocumented items.
//! Row-cache refreshes (claim the due rows, read them from SQLite, store them,
//! reschedule) by the shop's refresher, one row a step and in the daemon's batches
//! of 100 (one claim, one `IN` query, one store for them all), next to the book's
//! `cache_rows` round, in the same run, against a private redis-server and a seeded
//! SQLite file. Throughput is in rows.
//! Run: `cargo bench -p shop --bench row_refresh`.

use std::time::Duration;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use shop_cache::book;
use shop_cache::domain::ItemId;
use shop_cache::keys::Keys;
use shop_cache::row_cache::{DEFAULT_BATCH, RefreshStep, Refresher, RowCache};
use shop_db::Db;
use shop_testkit::{TestDb, TestRedis};

const ROWS: u64 = 1_000;

fn row_refresh(c: &mut Criterion) {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let server = TestRedis::start();
    let test_db = TestDb::sqlite();
    let (conn, db) = rt.block_on(async {
        let conn = shop_cache::connect(&server.url()).await.unwrap();
        let db = Db::connect(test_db.url()).await.unwrap();
        db.seed(ROWS, 1, &|_| {}).await.unwrap();
        // A delay this small keeps every row due, so each step refreshes one.
        let rows = RowCache::new(conn.clone(), Keys::default());
        for n in 1..=ROWS {
            rows.schedule(ItemId::new(n).unwrap(), 0.000_001)
                .await
                .unwrap();
        }
        (conn, db)
    });
    let refresher = Refresher::new(
        conn.clone(),
        Keys::default(),
        shop_app::rows::row_source(db.clone()),
    );
    let batched = Refresher::new(
        conn.clone(),
        Keys::default(),
        shop_app::rows::row_source(db.clone()),
    );
    let source = shop_app::rows::row_source(db);

    let mut g = c.benchmark_group("row_refresh");
    g.throughput(Throughput::Elements(1));
    g.measurement_time(Duration::from_secs(5));
    g.bench_function("shop_claim_read_finish", |b| {
        b.to_async(&rt).iter(|| async {
            assert!(matches!(
                refresher.step().await.unwrap(),
                RefreshStep::Refreshed(_)
            ));
        })
    });
    g.throughput(Throughput::Elements(DEFAULT_BATCH as u64));
    g.bench_function("shop_batch_of_100", |b| {
        b.to_async(&rt).iter(|| async {
            let done = batched.step_batch().await.unwrap();
            assert_eq!(done.refreshed, DEFAULT_BATCH as u64);
        })
    });
    g.throughput(Throughput::Elements(1));
    g.bench_function("book_cache_rows_round", |b| {
        b.to_async(&rt).iter(|| async {
            let mut conn = conn.clone();
            assert!(
                book::cache_rows_once(&mut conn, &Keys::default(), &source)
                    .await
                    .unwrap()
            );
        })
    });
    g.finish();
}

criterion_group!(benches, row_refresh);
criterion_main!(benches);
