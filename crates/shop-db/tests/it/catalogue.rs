//! Catalogue changes: add, update, retire, import, and what listings, search and
//! checkout see after each, on both backends.

use shop_db::catalogue::{AddOutcome, EditOutcome, RetiredInImport};
use shop_db::orders::CheckoutOutcome;
use shop_db::search::SearchWords;
use shop_domain::catalogue::{ItemEdit, ItemFields};
use shop_domain::{ItemId, UserId};

use crate::databases;

fn item(n: u64) -> ItemId {
    ItemId::new(n).unwrap()
}

fn fields(title: &str, price: i64, category: &str) -> ItemFields {
    ItemFields::new(title, "A thing.", price, category).unwrap()
}

async fn user(db: &shop_db::Db) -> UserId {
    let id: i64 = sqlx::query_scalar(
        "INSERT INTO users (name, password_hash, created_at) VALUES ('ivy', 'x', 0) RETURNING id",
    )
    .fetch_one(db.pool())
    .await
    .unwrap();
    UserId::from_i64(id).unwrap()
}

#[tokio::test]
async fn an_added_item_is_listed_searched_and_sold() {
    for (test_db, db) in databases().await {
        let kind = test_db.kind();
        db.seed(10, 3, &|_| {}).await.unwrap();
        let AddOutcome::Added(added) = db
            .add_item(None, &fields("Zebra kettle", 1234, "garden"), 3)
            .await
            .unwrap()
        else {
            panic!("{kind}: not added")
        };
        assert_eq!(added.id, item(11), "{kind}: the next id");
        assert_eq!(db.item(item(11)).await.unwrap().unwrap(), added);
        let chosen = db
            .add_item(Some(item(500)), &fields("Far", 1, "newdept"), 0)
            .await
            .unwrap();
        assert!(
            matches!(chosen, AddOutcome::Added(ref it) if it.id == item(500)),
            "{kind}"
        );
        assert_eq!(
            db.add_item(Some(item(500)), &fields("Again", 1, "x"), 0)
                .await
                .unwrap(),
            AddOutcome::IdTaken(item(500)),
            "{kind}"
        );
        // The largest id taken: an add without an id takes the lowest free
        // one, then the next.
        let last = item(ItemId::MAX);
        assert!(matches!(
            db.add_item(Some(last), &fields("Last", 1, "x"), 0)
                .await
                .unwrap(),
            AddOutcome::Added(_)
        ));
        let count = db.item_count().await.unwrap();
        let mut free = 1;
        while db.item(item(free)).await.unwrap().is_some() {
            free += 1;
        }
        for want in [free, free + 1] {
            match db
                .add_item(None, &fields("After", 1, "x"), 0)
                .await
                .unwrap()
            {
                AddOutcome::Added(added) => assert_eq!(added.id, item(want), "{kind}"),
                other => panic!("{kind}: {other:?}"),
            }
        }
        assert_eq!(db.item_count().await.unwrap(), count + 2, "{kind}");
        assert!(
            db.categories()
                .await
                .unwrap()
                .contains(&"newdept".to_owned()),
            "{kind}"
        );
        let found = db
            .search(&SearchWords::from_text("zebra"), 0, 10)
            .await
            .unwrap();
        assert_eq!(found.len(), 1, "{kind}");
        let garden = db.items_page(Some("garden"), None, 100).await.unwrap();
        assert!(garden.iter().any(|it| it.id == item(11)), "{kind}");

        let buyer = user(&db).await;
        let placed = db
            .checkout(
                buyer,
                &[(item(11), 2)],
                &db.cart_version(&[(item(11), 2)]).await.unwrap(),
                "k1",
                1,
            )
            .await
            .unwrap();
        assert!(
            matches!(
                placed,
                CheckoutOutcome::Placed {
                    total_cents: 2468,
                    ..
                }
            ),
            "{kind}: {placed:?}"
        );
    }
}

#[tokio::test]
async fn an_update_changes_what_it_names_and_checkout_charges_the_new_price() {
    for (test_db, db) in databases().await {
        let kind = test_db.kind();
        db.add_item(Some(item(1)), &fields("Old title", 1000, "kitchen"), 10)
            .await
            .unwrap();
        let edit = ItemEdit::new(Some("New title"), None, Some(1500), Some("garden")).unwrap();
        let EditOutcome::Applied(change) = db.update_item(item(1), &edit, None).await.unwrap()
        else {
            panic!("{kind}: not applied")
        };
        assert!(change.changed(), "{kind}");
        assert_eq!(change.before.as_ref().unwrap().price_cents, 1000);
        assert_eq!(
            (
                change.after.title.as_str(),
                change.after.price_cents,
                change.after.category.as_str()
            ),
            ("New title", 1500, "garden"),
            "{kind}"
        );
        assert_eq!(change.after.description, "A thing.", "{kind}: left alone");
        assert_eq!(
            db.item(item(1)).await.unwrap().unwrap(),
            change.after,
            "{kind}"
        );
        // The old department is gone with its only item; search sees the title.
        assert_eq!(db.categories().await.unwrap(), ["garden"], "{kind}");
        assert!(
            db.search(&SearchWords::from_text("old"), 0, 5)
                .await
                .unwrap()
                .is_empty(),
            "{kind}"
        );
        assert_eq!(
            db.search(&SearchWords::from_text("new"), 0, 5)
                .await
                .unwrap()
                .len(),
            1,
            "{kind}"
        );
        // The same values again: no change.
        let EditOutcome::Applied(again) = db.update_item(item(1), &edit, None).await.unwrap()
        else {
            panic!("{kind}: not applied")
        };
        assert!(!again.changed(), "{kind}");
        assert_eq!(
            db.update_item(item(9), &edit, None).await.unwrap(),
            EditOutcome::NoSuchItem,
            "{kind}"
        );

        let buyer = user(&db).await;
        let placed = db
            .checkout(
                buyer,
                &[(item(1), 1)],
                &db.cart_version(&[(item(1), 1)]).await.unwrap(),
                "k",
                1,
            )
            .await
            .unwrap();
        assert!(
            matches!(
                placed,
                CheckoutOutcome::Placed {
                    total_cents: 1500,
                    ..
                }
            ),
            "{kind}: {placed:?}"
        );
    }
}

#[tokio::test]
async fn a_retired_item_leaves_listings_and_search_and_checkout_refuses_it() {
    for (test_db, db) in databases().await {
        let kind = test_db.kind();
        db.add_item(Some(item(1)), &fields("Lamp", 500, "home"), 10)
            .await
            .unwrap();
        db.add_item(Some(item(2)), &fields("Lamp shade", 300, "home"), 10)
            .await
            .unwrap();
        let buyer = user(&db).await;
        db.checkout(
            buyer,
            &[(item(1), 1)],
            &db.cart_version(&[(item(1), 1)]).await.unwrap(),
            "before",
            1,
        )
        .await
        .unwrap();

        let change = db.retire_item(item(1), 77).await.unwrap().unwrap();
        assert!(change.changed() && change.after.retired, "{kind}");
        assert!(
            db.item(item(1)).await.unwrap().unwrap().retired,
            "{kind}: kept"
        );
        let listed: Vec<ItemId> = db
            .items_page(None, None, 10)
            .await
            .unwrap()
            .iter()
            .map(|i| i.id)
            .collect();
        assert_eq!(listed, [item(2)], "{kind}");
        let home: Vec<ItemId> = db
            .items_page(Some("home"), None, 10)
            .await
            .unwrap()
            .iter()
            .map(|i| i.id)
            .collect();
        assert_eq!(home, [item(2)], "{kind}");
        let found: Vec<ItemId> = db
            .search(&SearchWords::from_text("lamp"), 0, 10)
            .await
            .unwrap()
            .iter()
            .map(|i| i.id)
            .collect();
        assert_eq!(found, [item(2)], "{kind}");

        let refused = db
            .checkout(
                buyer,
                &[(item(2), 1), (item(1), 1)],
                &db.cart_version(&[(item(2), 1), (item(1), 1)])
                    .await
                    .unwrap(),
                "after",
                2,
            )
            .await
            .unwrap();
        assert_eq!(
            refused,
            CheckoutOutcome::Retired { item_id: item(1) },
            "{kind}"
        );
        let stock: i64 = sqlx::query_scalar("SELECT stock FROM inventory WHERE item_id = 2")
            .fetch_one(db.pool())
            .await
            .unwrap();
        assert_eq!(stock, 10, "{kind}: nothing was taken");
        assert_eq!(
            db.orders_of(buyer, 10).await.unwrap().len(),
            1,
            "{kind}: the old order stays"
        );

        // Retiring again changes nothing; the last item of a department takes it away.
        assert!(
            !db.retire_item(item(1), 78)
                .await
                .unwrap()
                .unwrap()
                .changed(),
            "{kind}"
        );
        db.retire_item(item(2), 79).await.unwrap();
        assert!(db.categories().await.unwrap().is_empty(), "{kind}");
        assert_eq!(db.retire_item(item(3), 80).await.unwrap(), None, "{kind}");
    }
}

#[tokio::test]
async fn an_import_adds_changes_and_leaves_alone_and_brings_a_retired_item_back_when_told() {
    for (test_db, db) in databases().await {
        let kind = test_db.kind();
        db.add_item(Some(item(1)), &fields("One", 100, "a"), 1)
            .await
            .unwrap();
        db.add_item(Some(item(2)), &fields("Two", 200, "a"), 1)
            .await
            .unwrap();
        db.retire_item(item(2), 5).await.unwrap();
        let lines = vec![
            (item(1), fields("One", 100, "a"), 0),
            (item(2), fields("Two", 250, "a"), 0),
            (item(3), fields("Three", 300, "b"), 7),
        ];
        let retired = db.item(item(2)).await.unwrap().unwrap();
        let imported = db
            .import_items(&lines, RetiredInImport::Keep)
            .await
            .unwrap();
        let ids: Vec<ItemId> = imported.changes.iter().map(|c| c.after.id).collect();
        assert_eq!(ids, [item(3)], "{kind}: item 1 unchanged");
        assert_eq!(imported.kept_retired, [item(2)], "{kind}");
        assert_eq!(
            db.item(item(2)).await.unwrap().unwrap(),
            retired,
            "{kind}: as it was"
        );
        let changes = db
            .import_items(&lines, RetiredInImport::SellAgain)
            .await
            .unwrap()
            .changes;
        let ids: Vec<ItemId> = changes.iter().map(|c| c.after.id).collect();
        assert_eq!(ids, [item(2)], "{kind}: items 1 and 3 unchanged");
        let two = db.item(item(2)).await.unwrap().unwrap();
        assert!(!two.retired && two.price_cents == 250, "{kind}: sold again");
        let stock: i64 = sqlx::query_scalar("SELECT stock FROM inventory WHERE item_id = 3")
            .fetch_one(db.pool())
            .await
            .unwrap();
        assert_eq!(stock, 7, "{kind}");
        assert_eq!(
            db.search(&SearchWords::from_text("two"), 0, 5)
                .await
                .unwrap()
                .len(),
            1,
            "{kind}"
        );
        assert_eq!(
            db.import_items(&lines, RetiredInImport::SellAgain)
                .await
                .unwrap()
                .changes,
            [],
            "{kind}: the same lines again change nothing"
        );
    }
}
