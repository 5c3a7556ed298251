//! An item's units changed by hand (`shop items stock`): received, written off,
//! counted; refused for an item on sale, retired, unknown, or out of range.

use shop_db::inventory::{MAX_STOCK, Sale, SaleSet, StockChange, StockChanged};
use shop_domain::ItemId;

use crate::databases;

const NOW: i64 = 1_800_000_000;

fn item(n: u64) -> ItemId {
    ItemId::new(n).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn units_are_received_written_off_and_counted_and_nothing_else_changes() {
    for (test_db, db) in databases().await {
        let kind = test_db.kind();
        db.seed(10, 1, &|_| {}).await.unwrap();
        let stock = |n| {
            let db = db.clone();
            async move { db.inventory_row(item(n)).await.unwrap().unwrap().stock }
        };
        let start = stock(2).await;
        let got = db.change_stock(item(2), StockChange::Set(5), NOW).await;
        assert_eq!(
            got.unwrap(),
            StockChanged::Changed {
                before: start,
                after: 5
            },
            "{kind}"
        );
        // Twenty deliveries at once: each adds to what the others left.
        let adds = (0..20).map(|_| {
            let db = db.clone();
            tokio::spawn(async move { db.change_stock(item(2), StockChange::Add(3), NOW).await })
        });
        for added in futures::future::join_all(adds).await {
            assert!(matches!(
                added.unwrap().unwrap(),
                StockChanged::Changed { .. }
            ));
        }
        assert_eq!(stock(2).await, 65, "{kind}");
        let got = db.change_stock(item(2), StockChange::Add(-65), NOW).await;
        assert_eq!(
            got.unwrap(),
            StockChanged::Changed {
                before: 65,
                after: 0
            },
            "{kind}"
        );

        // Refused, and nothing written: below 0, above the most, no such item.
        for change in [
            StockChange::Add(-1),
            StockChange::Set(-1),
            StockChange::Set(MAX_STOCK + 1),
            StockChange::Add(i64::MAX),
        ] {
            let got = db.change_stock(item(2), change, NOW).await.unwrap();
            assert_eq!(got, StockChanged::OutOfRange { before: 0 }, "{kind}");
        }
        assert_eq!(stock(2).await, 0, "{kind}");
        let got = db.change_stock(item(99), StockChange::Add(1), NOW).await;
        assert_eq!(got.unwrap(), StockChanged::NoSuchItem, "{kind}");

        // An item whose sale has not ended: its units are the sale's.
        let had = stock(3).await;
        let sale = Sale {
            stock: 4,
            price_cents: 100,
            start: NOW + 60,
            end: NOW + 600,
        };
        assert!(db.set_sale(item(3), sale, NOW).await.unwrap().is_set());
        for change in [StockChange::Add(10), StockChange::Set(10)] {
            let got = db.change_stock(item(3), change, NOW).await.unwrap();
            assert_eq!(got, StockChanged::OnSale { end: NOW + 600 }, "{kind}");
        }
        assert_eq!(stock(3).await, 4, "{kind}");
        // Once it ended, they are the item's again, with those it had beyond
        // the sale's (kept back while it ran).
        let got = db.change_stock(item(3), StockChange::Add(10), NOW + 600);
        assert_eq!(
            got.await.unwrap(),
            StockChanged::Changed {
                before: had.max(4),
                after: had.max(4) + 10
            },
            "{kind}"
        );

        // A retired item is not sold: its stock stays.
        db.retire_item(item(4), NOW).await.unwrap();
        let before = stock(4).await;
        let got = db.change_stock(item(4), StockChange::Set(1), NOW).await;
        assert_eq!(got.unwrap(), StockChanged::Retired, "{kind}");
        assert_eq!(stock(4).await, before, "{kind}");
    }
}

/// A flash sale's units are taken from the item's: the rest are kept back
/// while it runs and given back when it ends, whether it is stopped, or its
/// window passes (the sale-end step, or the item's next stock change or
/// checkout); a sale of more units than the item has adds the difference.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sale_takes_its_units_from_the_stock_and_gives_the_rest_back_at_its_end() {
    for (test_db, db) in databases().await {
        let kind = test_db.kind();
        db.seed(10, 1, &|_| {}).await.unwrap();
        let stock = |n| {
            let db = db.clone();
            async move { db.inventory_row(item(n)).await.unwrap().unwrap().stock }
        };
        let sale = |stock, end| Sale {
            stock,
            price_cents: 100,
            start: NOW - 10,
            end,
        };
        assert!(db.set_stock(item(2), 280).await.unwrap());
        assert_eq!(
            db.set_sale(item(2), sale(5, NOW + 600), NOW).await.unwrap(),
            SaleSet::Started {
                stock_before: 280,
                held: 275
            },
            "{kind}"
        );
        assert_eq!(stock(2).await, 5, "{kind}: the sale's units");
        // New terms while it runs: its units left and those kept back are
        // shared again.
        assert_eq!(
            db.set_sale(item(2), sale(20, NOW + 600), NOW)
                .await
                .unwrap(),
            SaleSet::Changed {
                stock_before: 5,
                held: 260
            },
            "{kind}"
        );
        let users = crate::flash::users(&db, 3).await;
        for (n, user) in users.iter().enumerate() {
            let key = format!("k{n}");
            let won = db
                .record_flash_win(*user, item(2), &key, 1, NOW, None)
                .await;
            assert!(
                matches!(won.unwrap(), shop_db::flash::WinRecord::Ordered { .. }),
                "{kind}"
            );
        }
        assert_eq!(stock(2).await, 17, "{kind}");
        // Stopped: the 17 left and the 260 kept back.
        assert!(db.end_sale(item(2), NOW).await.unwrap());
        assert_eq!(stock(2).await, 277, "{kind}");

        // A sale of none (a slip of the finger) loses nothing once it ends,
        // here by its window passing.
        let set = db.set_sale(item(2), sale(0, NOW + 60), NOW).await.unwrap();
        assert_eq!(
            set,
            SaleSet::Started {
                stock_before: 277,
                held: 277
            },
            "{kind}"
        );
        assert_eq!(stock(2).await, 0, "{kind}");
        assert_eq!(
            db.return_held_stock(NOW + 59).await.unwrap(),
            vec![],
            "{kind}: running"
        );
        assert_eq!(
            db.return_held_stock(NOW + 60).await.unwrap(),
            vec![item(2)],
            "{kind}"
        );
        assert_eq!(stock(2).await, 277, "{kind}");
        assert_eq!(
            db.return_held_stock(NOW + 61).await.unwrap(),
            vec![],
            "{kind}: once"
        );

        // Ended, not given back yet: a count counts what the item has.
        assert!(
            db.set_sale(item(2), sale(7, NOW + 60), NOW)
                .await
                .unwrap()
                .is_set()
        );
        let available = |now| {
            let db = db.clone();
            async move { db.availability(&[item(2)], now).await.unwrap()[&item(2)] }
        };
        let running = available(NOW + 59).await;
        assert_eq!(
            (running.stock, running.on_sale(NOW + 59)),
            (7, true),
            "{kind}: the sale's units while it runs"
        );
        let ended = available(NOW + 60).await;
        assert_eq!(
            (ended.stock, ended.on_sale(NOW + 60)),
            (277, false),
            "{kind}: the units kept back count as soon as it has ended"
        );
        let got = db
            .change_stock(item(2), StockChange::Set(100), NOW + 60)
            .await;
        assert_eq!(
            got.unwrap(),
            StockChanged::Changed {
                before: 277,
                after: 100
            },
            "{kind}"
        );
        assert_eq!(
            db.return_held_stock(NOW + 61).await.unwrap(),
            vec![],
            "{kind}"
        );
        assert_eq!(stock(2).await, 100, "{kind}");

        // More units than the item has: the difference is added, none kept.
        assert!(db.set_stock(item(3), 3).await.unwrap());
        assert_eq!(
            db.set_sale(item(3), sale(10, NOW + 60), NOW).await.unwrap(),
            SaleSet::Started {
                stock_before: 3,
                held: 0
            },
            "{kind}"
        );
        assert!(db.end_sale(item(3), NOW).await.unwrap());
        assert_eq!(stock(3).await, 10, "{kind}");
    }
}
