use shop_db::Db;
use shop_db::flash::{BuyOutcome, WinRecord};
use shop_db::inventory::{Sale, SaleSet};
use shop_domain::{ItemId, UserId};

use crate::databases;

const NOW: i64 = 1_800_000_000;

fn item(n: u64) -> ItemId {
    ItemId::new(n).unwrap()
}

/// `n` users named u1..un (with a hash nobody can log in with), ids returned.
pub(crate) async fn users(db: &Db, n: usize) -> Vec<UserId> {
    let mut tx = db.pool().begin().await.unwrap();
    for i in 1..=n {
        sqlx::query("INSERT INTO users (name, password_hash, created_at) VALUES ($1, 'x', 0)")
            .bind(format!("u{i}"))
            .execute(&mut *tx)
            .await
            .unwrap();
    }
    tx.commit().await.unwrap();
    let ids: Vec<i64> = sqlx::query_scalar("SELECT id FROM users WHERE name LIKE 'u%' ORDER BY id")
        .fetch_all(db.pool())
        .await
        .unwrap();
    ids.into_iter()
        .map(|i| UserId::from_i64(i).unwrap())
        .collect()
}

async fn on_sale(db: &Db, stock: i64) {
    db.seed(10, 1, &|_| {}).await.unwrap();
    let sale = Sale {
        stock,
        price_cents: 999,
        start: NOW - 10,
        end: NOW + 3_600,
    };
    assert!(matches!(
        db.set_sale(item(1), sale, NOW).await.unwrap(),
        SaleSet::Started { .. }
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn five_hundred_buyers_for_twenty_units_never_oversell() {
    for (test_db, db) in databases().await {
        let kind = test_db.kind();
        on_sale(&db, 20).await;
        let buyers = users(&db, 500).await;
        let attempts = buyers.iter().enumerate().map(|(i, &user)| {
            let db = db.clone();
            tokio::spawn(async move {
                db.flash_buy(user, item(1), &format!("k{i}"), 1, NOW, None)
                    .await
            })
        });
        let outcomes: Vec<BuyOutcome> = futures::future::join_all(attempts)
            .await
            .into_iter()
            .map(|r| r.unwrap().unwrap())
            .collect();
        let bought = outcomes
            .iter()
            .filter(|o| matches!(o, BuyOutcome::Bought { .. }))
            .count();
        let sold_out = outcomes
            .iter()
            .filter(|o| **o == BuyOutcome::SoldOut)
            .count();
        assert_eq!((bought, sold_out), (20, 480), "{kind}");
        let row = db.inventory_row(item(1)).await.unwrap().unwrap();
        assert_eq!(row.stock, 0, "{kind}");
        assert_eq!(db.units_ordered(item(1)).await.unwrap(), 20, "{kind}");
        let orders: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM orders WHERE kind = 'flash'")
            .fetch_one(db.pool())
            .await
            .unwrap();
        assert_eq!(orders, 20, "{kind}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_with_the_same_key_buys_once_and_gets_the_same_answer() {
    for (test_db, db) in databases().await {
        let kind = test_db.kind();
        on_sale(&db, 5).await;
        let user = users(&db, 1).await[0];
        // Ten copies of the same request at once (a client retrying impatiently).
        let attempts = (0..10).map(|_| {
            let db = db.clone();
            tokio::spawn(async move { db.flash_buy(user, item(1), "same-key", 3, NOW, None).await })
        });
        let outcomes: Vec<BuyOutcome> = futures::future::join_all(attempts)
            .await
            .into_iter()
            .map(|r| r.unwrap().unwrap())
            .collect();
        let first = outcomes[0].clone();
        assert!(
            matches!(first, BuyOutcome::Bought { .. }),
            "{kind}: {first:?}"
        );
        assert!(outcomes.iter().all(|o| *o == first), "{kind}: {outcomes:?}");
        // And later.
        assert_eq!(
            db.flash_buy(user, item(1), "same-key", 3, NOW, None)
                .await
                .unwrap(),
            first
        );
        assert_eq!(db.units_ordered(item(1)).await.unwrap(), 1, "{kind}");
        assert_eq!(db.inventory_row(item(1)).await.unwrap().unwrap().stock, 4);
        // The same key for another item is refused, not answered with this order.
        assert_eq!(
            db.flash_buy(user, item(2), "same-key", 3, NOW, None)
                .await
                .unwrap(),
            BuyOutcome::KeyReused
        );
    }
}

#[tokio::test]
async fn the_per_user_limit_holds() {
    for (test_db, db) in databases().await {
        let kind = test_db.kind();
        on_sale(&db, 10).await;
        let ids = users(&db, 2).await;
        let (one, two) = (ids[0], ids[1]);
        assert!(matches!(
            db.flash_buy(one, item(1), "a", 1, NOW, None).await.unwrap(),
            BuyOutcome::Bought { .. }
        ));
        assert_eq!(
            db.flash_buy(one, item(1), "b", 1, NOW, None).await.unwrap(),
            BuyOutcome::LimitReached,
            "{kind}"
        );
        // The refusal took no stock and kept nothing for its key: asked again,
        // it is decided again.
        let kept: i64 =
            sqlx::query_scalar("SELECT COUNT(*) FROM flash_attempts WHERE idempotency_key = 'b'")
                .fetch_one(db.pool())
                .await
                .unwrap();
        assert_eq!(kept, 0, "{kind}");
        assert_eq!(
            db.flash_buy(one, item(1), "b", 1, NOW, None).await.unwrap(),
            BuyOutcome::LimitReached
        );
        assert_eq!(
            db.inventory_row(item(1)).await.unwrap().unwrap().stock,
            9,
            "{kind}"
        );
        // A limit of 2 lets the second through, not a third.
        for (key, expect_bought) in [("c", true), ("d", true), ("e", false)] {
            let got = db.flash_buy(two, item(1), key, 2, NOW, None).await.unwrap();
            assert_eq!(
                matches!(got, BuyOutcome::Bought { .. }),
                expect_bought,
                "{kind}: {key} {got:?}"
            );
        }
        assert_eq!(db.units_ordered(item(1)).await.unwrap(), 3);
    }
}

#[tokio::test]
async fn outside_the_window_or_unknown_items_are_refused() {
    for (test_db, db) in databases().await {
        let kind = test_db.kind();
        on_sale(&db, 10).await;
        let user = users(&db, 1).await[0];
        let before = db
            .flash_buy(user, item(1), "early", 1, NOW - 11, None)
            .await
            .unwrap();
        let at_end = db
            .flash_buy(user, item(1), "late", 1, NOW + 3_600, None)
            .await
            .unwrap();
        let never = db
            .flash_buy(user, item(2), "never", 1, NOW, None)
            .await
            .unwrap();
        let unknown = db
            .flash_buy(user, item(999), "nope", 1, NOW, None)
            .await
            .unwrap();
        assert_eq!(
            (before, at_end, never, unknown),
            (
                BuyOutcome::NotOnSale,
                BuyOutcome::NotOnSale,
                BuyOutcome::NotOnSale,
                BuyOutcome::UnknownItem
            ),
            "{kind}"
        );
        assert_eq!(db.inventory_row(item(1)).await.unwrap().unwrap().stock, 10);
        assert_eq!(db.units_ordered(item(1)).await.unwrap(), 0);
    }
}

/// The Redis-decided path's side here: a winner's order (the stock backstop
/// refusing once the database has none), the reconciler's fence against a late
/// order, a running sale's change keeping the users' counts and a new sale
/// resetting them, and one run's orders counted by their keys.
#[tokio::test]
async fn winners_orders_the_fence_and_counting_by_key() {
    for (test_db, db) in databases().await {
        let kind = test_db.kind();
        on_sale(&db, 2).await;
        let u = users(&db, 4).await;
        let won = db
            .record_flash_win(u[0], item(1), "run1-a", 1, NOW, None)
            .await
            .unwrap();
        let WinRecord::Ordered { order_id, .. } = won else {
            panic!("{kind}: {won:?}")
        };
        assert_eq!(
            db.record_flash_win(u[0], item(1), "run1-a", 1, NOW, None)
                .await
                .unwrap(),
            WinRecord::Earlier(BuyOutcome::Bought { order_id }),
            "{kind}: the same key again"
        );
        assert_eq!(
            db.record_flash_win(u[0], item(1), "run1-b", 1, NOW, None)
                .await
                .unwrap(),
            WinRecord::Refused(BuyOutcome::LimitReached),
            "{kind}"
        );
        // The reconciler fences an attempt that never wrote: a late order fails.
        assert_eq!(db.fence_flash(u[1], item(1), "run1-c").await.unwrap(), None);
        assert_eq!(
            db.record_flash_win(u[1], item(1), "run1-c", 1, NOW, None)
                .await
                .unwrap(),
            WinRecord::Earlier(BuyOutcome::Expired),
            "{kind}"
        );
        // And finds an order that did write.
        assert_eq!(
            db.fence_flash(u[0], item(1), "run1-a").await.unwrap(),
            Some(order_id),
            "{kind}"
        );
        assert!(matches!(
            db.record_flash_win(u[2], item(1), "run1-d", 1, NOW, None)
                .await
                .unwrap(),
            WinRecord::Ordered { .. }
        ));
        assert_eq!(
            db.record_flash_win(u[3], item(1), "run1-e", 1, NOW, None)
                .await
                .unwrap(),
            WinRecord::Refused(BuyOutcome::SoldOut),
            "{kind}: the backstop"
        );
        assert_eq!(db.inventory_row(item(1)).await.unwrap().unwrap().stock, 0);
        // The running sale changed (more units, a new end): the same sale, so
        // the users' counts stay, and the stock is the new one.
        let changed = Sale {
            stock: 1,
            price_cents: 999,
            start: NOW - 10,
            end: NOW + 60,
        };
        let SaleSet::Changed {
            stock_before: 0,
            held,
        } = db.set_sale(item(1), changed, NOW).await.unwrap()
        else {
            panic!("{kind}: the same sale, changed");
        };
        assert_eq!(
            db.record_flash_win(u[0], item(1), "run2-x", 1, NOW, None)
                .await
                .unwrap(),
            WinRecord::Refused(BuyOutcome::LimitReached),
            "{kind}: bought in this sale before it changed"
        );
        assert_eq!(db.inventory_row(item(1)).await.unwrap().unwrap().stock, 1);
        // A new sale once that one ended: the users' counts start again.
        let later = NOW + 120;
        let sale = Sale {
            stock: 1,
            price_cents: 999,
            start: later - 10,
            end: later + 60,
        };
        assert_eq!(
            db.set_sale(item(1), sale, later).await.unwrap(),
            SaleSet::Started {
                stock_before: 1 + held,
                held
            },
            "{kind}"
        );
        assert!(matches!(
            db.record_flash_win(u[0], item(1), "run2-a", 1, later, None)
                .await
                .unwrap(),
            WinRecord::Ordered { .. }
        ));
        assert_eq!(
            db.flash_units_keyed(item(1), "run1-").await.unwrap(),
            2,
            "{kind}"
        );
        assert_eq!(
            db.flash_units_keyed(item(1), "run2-").await.unwrap(),
            1,
            "{kind}"
        );
        assert_eq!(
            db.flash_units_keyed(item(1), "run3-").await.unwrap(),
            0,
            "{kind}"
        );
    }
}

/// Ending a sale: a running one ends now (a buy then is not on sale, its
/// units left and those kept back for after it are the item's stock); one not
/// begun yet ends as an empty window; nothing is left to end after.
#[tokio::test]
async fn end_sale_ends_a_running_or_coming_sale_now() {
    for (test_db, db) in databases().await {
        let kind = test_db.kind();
        db.seed(10, 1, &|_| {}).await.unwrap();
        let had = db.inventory_row(item(1)).await.unwrap().unwrap().stock;
        on_sale(&db, 7).await;
        let buyer = users(&db, 1).await[0];
        assert!(db.end_sale(item(1), NOW).await.unwrap(), "{kind}");
        assert!(!db.end_sale(item(1), NOW).await.unwrap(), "{kind}: ended");
        let row = db.inventory_row(item(1)).await.unwrap().unwrap();
        assert_eq!((row.stock, row.sale_end), (had.max(7), Some(NOW)), "{kind}");
        assert!(
            matches!(
                db.flash_buy(buyer, item(1), "k", 1, NOW, None)
                    .await
                    .unwrap(),
                BuyOutcome::NotOnSale
            ),
            "{kind}"
        );
        let coming = Sale {
            stock: 3,
            price_cents: 999,
            start: NOW + 600,
            end: NOW + 3_600,
        };
        db.set_sale(item(2), coming, NOW).await.unwrap();
        assert!(db.end_sale(item(2), NOW).await.unwrap(), "{kind}");
        let row = db.inventory_row(item(2)).await.unwrap().unwrap();
        assert_eq!(
            (row.sale_start, row.sale_end),
            (Some(NOW), Some(NOW)),
            "{kind}"
        );
        assert!(!db.end_sale(item(3), NOW).await.unwrap(), "{kind}: no sale");
    }
}
