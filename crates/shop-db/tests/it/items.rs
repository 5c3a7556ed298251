use shop_domain::{ItemId, UserId};

use crate::databases;

fn item(n: u64) -> ItemId {
    ItemId::new(n).unwrap()
}

#[tokio::test]
async fn five_thousand_ids_are_looked_up_in_bounded_chunks() {
    for (test_db, db) in databases().await {
        let kind = test_db.kind();
        db.seed(5_000, 3, &|_| {}).await.unwrap();
        // Newest first, so the answer's order is the question's, not the table's.
        let ids: Vec<ItemId> = (1..=5_000).rev().map(item).collect();
        let found = db.items(&ids).await.unwrap();
        assert_eq!(found.len(), 5_000, "{kind}");
        assert!(
            found.iter().zip(&ids).all(|(it, id)| it.id == *id),
            "{kind}"
        );
        assert_eq!(found[4_999], db.item(item(1)).await.unwrap().unwrap());

        // Missing ids are left out and repeated ones answered again, across chunks.
        let mut asked: Vec<ItemId> = (4_001..=6_000).map(item).collect();
        asked.extend((1..=600).map(item));
        asked.push(item(4_500));
        let found = db.items(&asked).await.unwrap();
        let got: Vec<u64> = found.iter().map(|it| it.id.get()).collect();
        let want: Vec<u64> = (4_001..=5_000).chain(1..=600).chain([4_500]).collect();
        assert_eq!(got, want, "{kind}");
        assert!(db.items(&[]).await.unwrap().is_empty());
    }
}

#[tokio::test]
async fn a_checkout_of_more_lines_than_one_chunk_is_placed() {
    for (test_db, db) in databases().await {
        let kind = test_db.kind();
        db.seed(1_200, 3, &|_| {}).await.unwrap();
        let user: i64 =
            sqlx::query_scalar("INSERT INTO users (name, password_hash, created_at) VALUES ('ivy', 'x', 0) RETURNING id")
                .fetch_one(db.pool())
                .await
                .unwrap();
        let user = UserId::from_i64(user).unwrap();
        sqlx::query("UPDATE inventory SET stock = 5")
            .execute(db.pool())
            .await
            .unwrap();
        let lines: Vec<(ItemId, u32)> = (1..=1_200).map(|id| (item(id), 1)).collect();
        let prices: i64 = db
            .items(&lines.iter().map(|l| l.0).collect::<Vec<_>>())
            .await
            .unwrap()
            .iter()
            .map(|it| it.price_cents)
            .sum();
        let placed = db
            .checkout(
                user,
                &lines,
                &db.cart_version(&lines).await.unwrap(),
                "big",
                1,
            )
            .await
            .unwrap();
        assert!(
            matches!(placed, shop_db::orders::CheckoutOutcome::Placed { total_cents, .. } if total_cents == prices),
            "{kind}: {placed:?}"
        );
        assert_eq!(
            db.inventory_row(item(1_200)).await.unwrap().unwrap().stock,
            4
        );

        // An unknown item beyond the first chunk still refuses the whole order.
        let mut bad = lines.clone();
        bad.push((item(9_999), 1));
        assert_eq!(
            db.checkout(user, &bad, &db.cart_version(&bad).await.unwrap(), "bad", 1)
                .await
                .unwrap(),
            shop_db::orders::CheckoutOutcome::UnknownItem {
                item_id: item(9_999)
            },
            "{kind}"
        );
        assert_eq!(
            db.inventory_row(item(1)).await.unwrap().unwrap().stock,
            4,
            "{kind}"
        );
    }
}

#[tokio::test]
async fn browsing_walks_every_item_once_by_keyset_pages() {
    for (test_db, db) in databases().await {
        let kind = test_db.kind();
        db.seed(2_000, 9, &|_| {}).await.unwrap();
        let want: Vec<String> =
            sqlx::query_scalar("SELECT DISTINCT category FROM items ORDER BY category")
                .fetch_all(db.pool())
                .await
                .unwrap();
        let categories = db.categories().await.unwrap();
        assert_eq!(categories, want, "{kind}");
        assert!(categories.len() > 1, "{kind}");

        // The whole catalogue, 64 at a time: every id once, in order.
        let mut seen = Vec::new();
        let mut after = None;
        loop {
            let page = db.items_page(None, after, 64).await.unwrap();
            if page.is_empty() {
                break;
            }
            assert!(page.len() <= 64);
            after = page.last().map(|it| it.id);
            seen.extend(page.iter().map(|it| it.id.get()));
        }
        assert_eq!(seen, (1..=2_000).collect::<Vec<u64>>(), "{kind}");

        // One department: exactly its items, in id order.
        let category = &categories[1];
        let want: Vec<i64> =
            sqlx::query_scalar("SELECT id FROM items WHERE category = $1 ORDER BY id")
                .bind(category)
                .fetch_all(db.pool())
                .await
                .unwrap();
        let mut seen = Vec::new();
        let mut after = None;
        loop {
            let page = db.items_page(Some(category), after, 50).await.unwrap();
            if page.is_empty() {
                break;
            }
            assert!(page.iter().all(|it| &it.category == category), "{kind}");
            after = page.last().map(|it| it.id);
            seen.extend(page.iter().map(|it| it.id.to_i64()));
        }
        assert_eq!(seen, want, "{kind}");
        // The items that end each page of 50 of the department: the last of each
        // page the walk above read (a partial last page ends none).
        let ends: Vec<i64> = db
            .page_ends(Some(category), 50)
            .await
            .unwrap()
            .iter()
            .map(|id| id.to_i64())
            .collect();
        let whole: Vec<i64> = want.chunks_exact(50).map(|c| c[49]).collect();
        assert_eq!(ends, whole, "{kind}");
        let all = db.page_ends(None, 64).await.unwrap();
        assert_eq!(all.len(), 2_000 / 64, "{kind}");
        assert_eq!(all[0], item(64), "{kind}");
        assert!(
            db.page_ends(Some("no such department"), 50)
                .await
                .unwrap()
                .is_empty()
        );
        assert!(
            db.items_page(Some("no such department"), None, 50)
                .await
                .unwrap()
                .is_empty()
        );
        assert!(
            db.items_page(None, Some(item(2_000)), 50)
                .await
                .unwrap()
                .is_empty()
        );
    }
}

#[tokio::test]
async fn the_batch_read_writes_each_rows_json_as_one_rows_read_does() {
    // SQLite builds the batch's JSON itself; it must be byte for byte what
    // serializing one row writes, whatever the title holds.
    let titles = [
        "plain",
        "a \"quoted\" \\ back\\slash / slash",
        "line\nbreak\ttab\rreturn\u{8}\u{c}",
        "\u{1}\u{1f}\u{7f} controls",
        "ünïcødé 日本 🎉 </script>",
    ];
    for (test_db, db) in databases().await {
        let kind = test_db.kind();
        db.seed(10, 3, &|_| {}).await.unwrap();
        for (n, title) in titles.iter().enumerate() {
            sqlx::query(&format!("UPDATE items SET title = $1 WHERE id = {}", n + 1))
                .bind(*title)
                .execute(db.pool())
                .await
                .unwrap();
        }
        sqlx::query(
            "UPDATE inventory SET sale_price_cents = 99, sale_start = 1700000000, \
             sale_end = 1700003600 WHERE item_id = 2",
        )
        .execute(db.pool())
        .await
        .unwrap();
        let ids: Vec<ItemId> = (1..=12).map(item).collect();
        let found = db.inventory_json_many(&ids).await.unwrap();
        assert_eq!(found.len(), 10, "{kind}: the unknown ids are left out");
        for n in 1..=10 {
            let one = db.inventory_json(item(n)).await.unwrap().unwrap();
            assert_eq!(found[&item(n)], one, "{kind}: row {n}");
        }
        let row: serde_json::Value = serde_json::from_str(&found[&item(2)]).unwrap();
        assert_eq!(row["title"], titles[1], "{kind}");
        assert_eq!(row["sale_price_cents"], 99, "{kind}");
        assert!(db.inventory_json_many(&[]).await.unwrap().is_empty());
        assert!(
            db.inventory_json_many(&[item(99)])
                .await
                .unwrap()
                .is_empty(),
            "{kind}"
        );
    }
}
