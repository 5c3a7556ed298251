use shop_db::seed::DEMO_USERS;
use shop_domain::ItemId;
use sqlx::Row;

use crate::databases;

/// A fingerprint of every seeded row, to prove a second run changes nothing.
async fn fingerprint(db: &shop_db::Db) -> (i64, i64, i64, Vec<String>) {
    let row = sqlx::query(
        "SELECT COUNT(*) AS n, CAST(SUM(price_cents) AS BIGINT) AS total, \
         CAST(SUM(LENGTH(title)) AS BIGINT) AS chars FROM items",
    )
    .fetch_one(db.pool())
    .await
    .unwrap();
    let hashes: Vec<String> = sqlx::query_scalar("SELECT password_hash FROM users ORDER BY name")
        .fetch_all(db.pool())
        .await
        .unwrap();
    (
        row.try_get("n").unwrap(),
        row.try_get("total").unwrap(),
        row.try_get("chars").unwrap(),
        hashes,
    )
}

#[tokio::test]
async fn seeding_is_deterministic_and_idempotent() {
    for (test_db, db) in databases().await {
        let kind = test_db.kind();
        let progress = std::sync::Mutex::new(Vec::new());
        let report = db
            .seed(1_234, 7, &|done| progress.lock().unwrap().push(done))
            .await
            .unwrap();
        assert_eq!(report.items, 1_234, "{kind}");
        let (name, password) = DEMO_USERS[0];
        assert!(
            db.check_password(name, password).await.unwrap().is_none(),
            "{kind}: no demo user unless asked for"
        );
        assert_eq!(db.add_demo_users().await.unwrap(), DEMO_USERS);
        assert_eq!(progress.into_inner().unwrap(), vec![500, 1_000, 1_234]);
        assert_eq!(db.item_count().await.unwrap(), 1_234);
        let before = fingerprint(&db).await;

        let again = db.seed(1_234, 7, &|_| {}).await.unwrap();
        assert_eq!(again.items, 0, "{kind}: nothing new");
        assert!(
            db.add_demo_users().await.unwrap().is_empty(),
            "{kind}: nothing new"
        );
        assert_eq!(fingerprint(&db).await, before, "{kind}: nothing changed");

        // Every item has an inventory row, and the demo users can log in.
        let row = db
            .inventory_row(ItemId::new(1_234).unwrap())
            .await
            .unwrap()
            .unwrap();
        assert!(row.stock >= 0 && row.sale_start.is_none());
        assert!(db.check_password(name, password).await.unwrap().is_some());
    }
}

#[tokio::test]
async fn the_same_seed_gives_the_same_catalogue_everywhere() {
    let dbs = databases().await;
    let mut seen = Vec::new();
    for (_test_db, db) in &dbs {
        db.seed(300, 99, &|_| {}).await.unwrap();
        let item = db.item(ItemId::new(217).unwrap()).await.unwrap().unwrap();
        seen.push(item);
    }
    let (_keep, other) = crate::databases().await.remove(0);
    other.seed(300, 100, &|_| {}).await.unwrap();
    let different = other
        .item(ItemId::new(217).unwrap())
        .await
        .unwrap()
        .unwrap();
    assert!(seen.windows(2).all(|w| w[0] == w[1]), "{seen:?}");
    assert_ne!(seen[0], different, "another seed, another catalogue");
}
