//! An item's units changed by hand (`shop items stock`): received, written off,
//! counted; refused for an item on sale, retired, unknown, or out of range.

use shop_db::inventory::{MAX_STOCK, Sale, StockChange, StockChanged};
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
        // Once it ended, they are the item's again.
        let got = db.change_stock(item(3), StockChange::Add(10), NOW + 600);
        assert_eq!(
            got.await.unwrap(),
            StockChanged::Changed {
                before: 4,
                after: 14
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
