//! A write lock held elsewhere: writes give up in seconds and say "unavailable";
//! reads go on as if nothing happened.

use std::time::{Duration, Instant};

use shop_db::flash::BuyOutcome;
use shop_db::inventory::{Sale, SaleSet};
use shop_db::orders::CheckoutOutcome;
use shop_db::{Db, DbError};
use shop_domain::{ItemId, UserId};
use shop_testkit::TestDb;
use sqlx::Connection;

const NOW: i64 = 1_800_000_000;

fn item(n: u64) -> ItemId {
    ItemId::new(n).unwrap()
}

/// A seeded catalogue with item 1 on sale, and a user (inserted directly: no hashing).
async fn shop(db: &Db) -> UserId {
    db.seed(50, 1, &|_| {}).await.unwrap();
    let sale = Sale {
        stock: 10,
        price_cents: 999,
        start: NOW - 10,
        end: NOW + 3_600,
    };
    assert!(matches!(
        db.set_sale(item(1), sale, NOW).await.unwrap(),
        SaleSet::Started { .. }
    ));
    let id: i64 = sqlx::query_scalar(
        "INSERT INTO users (name, password_hash, created_at) VALUES ('lock', 'x', 0) RETURNING id",
    )
    .fetch_one(db.pool())
    .await
    .unwrap();
    UserId::from_i64(id).unwrap()
}

/// A write that failed, how long it took, and whether it says "try again later".
fn unavailable<T: std::fmt::Debug>(what: &str, outcome: Result<T, DbError>, took: Duration) {
    let err = outcome.expect_err(what);
    assert!(err.is_unavailable(), "{what}: {err}");
    assert!(took < Duration::from_secs(3), "{what} took {took:?}");
}

/// 20 reads at once (single items and 200-item lists), each answering within a second.
async fn reads_stay_quick(db: &Db) {
    let ids: Vec<ItemId> = (1..=50).map(item).collect();
    let reads = (0..20).map(|i| {
        let db = db.clone();
        let ids = ids.clone();
        tokio::spawn(async move {
            let started = Instant::now();
            if i % 2 == 0 {
                assert!(db.item(item(i + 1)).await.unwrap().is_some());
            } else {
                assert_eq!(db.items(&ids).await.unwrap().len(), 50);
            }
            started.elapsed()
        })
    });
    for took in futures::future::join_all(reads).await {
        let took = took.unwrap();
        assert!(took < Duration::from_secs(1), "a read took {took:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sqlite_write_lock_held_by_another_process_fails_writes_fast_and_spares_reads() {
    let test_db = TestDb::sqlite();
    let db = Db::connect(test_db.url()).await.unwrap();
    let user = shop(&db).await;

    // "Another process": a connection of its own, outside the shop's pools, holding
    // SQLite's write lock.
    let lock = test_db.hold_write_lock_async().await;

    let checkout = {
        let db = db.clone();
        tokio::spawn(async move {
            let started = Instant::now();
            let outcome = db
                .checkout(
                    user,
                    &[(item(2), 1)],
                    &db.cart_version(&[(item(2), 1)]).await.unwrap(),
                    "k1",
                    NOW,
                )
                .await;
            (outcome, started.elapsed())
        })
    };
    let flash = {
        let db = db.clone();
        tokio::spawn(async move {
            let started = Instant::now();
            let outcome = db.flash_buy(user, item(1), "k2", 1, NOW, None).await;
            (outcome, started.elapsed())
        })
    };
    // While both writers wait for the lock, reads answer at once.
    tokio::time::sleep(Duration::from_millis(100)).await;
    reads_stay_quick(&db).await;
    db.ping().await.unwrap();
    let started = Instant::now();
    let probe = db.probe_write().await;
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "{:?}",
        started.elapsed()
    );
    assert!(probe.unwrap_err().is_unavailable());

    let (outcome, took) = checkout.await.unwrap();
    unavailable("checkout", outcome, took);
    let (outcome, took) = flash.await.unwrap();
    unavailable("flash purchase", outcome, took);

    // The lock goes; writing works again, and nothing half-done was left behind.
    lock.release();
    db.probe_write().await.unwrap();
    assert!(matches!(
        db.checkout(
            user,
            &[(item(2), 1)],
            &db.cart_version(&[(item(2), 1)]).await.unwrap(),
            "k1",
            NOW
        )
        .await
        .unwrap(),
        CheckoutOutcome::Placed { .. }
    ));
    assert!(matches!(
        db.flash_buy(user, item(1), "k2", 1, NOW, None)
            .await
            .unwrap(),
        BuyOutcome::Bought { .. }
    ));
    assert_eq!(db.units_ordered(item(1)).await.unwrap(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_postgres_row_lock_held_elsewhere_fails_writes_fast_and_spares_reads() {
    let Some(test_db) = TestDb::postgres().await else {
        return;
    };
    let db = Db::connect(test_db.url()).await.unwrap();
    let user = shop(&db).await;

    let mut other = sqlx::PgConnection::connect(test_db.url()).await.unwrap();
    sqlx::query("BEGIN").execute(&mut other).await.unwrap();
    sqlx::query("SELECT stock FROM inventory WHERE item_id IN (1, 2) FOR UPDATE")
        .execute(&mut other)
        .await
        .unwrap();

    let started = Instant::now();
    let cart = [(item(2), 1)];
    let shown = db.cart_version(&cart).await.unwrap();
    let checkout = db.checkout(user, &cart, &shown, "k1", NOW);
    let flash = async {
        reads_stay_quick(&db).await;
        db.flash_buy(user, item(1), "k2", 1, NOW, None).await
    };
    let (checkout, flash) = tokio::join!(checkout, flash);
    unavailable("checkout", checkout, started.elapsed());
    unavailable("flash purchase", flash, started.elapsed());
    db.ping().await.unwrap();
    db.probe_write().await.unwrap();

    sqlx::query("ROLLBACK").execute(&mut other).await.unwrap();
    assert!(matches!(
        db.flash_buy(user, item(1), "k2", 1, NOW, None)
            .await
            .unwrap(),
        BuyOutcome::Bought { .. }
    ));
}
