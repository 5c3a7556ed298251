use shop_db::search::SearchWords;

use crate::databases;

async fn add_item(db: &shop_db::Db, id: i64, title: &str, description: &str) {
    sqlx::query(
        "INSERT INTO items (id, title, description, price_cents, category) \
         VALUES ($1, $2, $3, 100, 'test')",
    )
    .bind(id)
    .bind(title)
    .bind(description)
    .execute(db.pool())
    .await
    .unwrap();
}

async fn ids(db: &shop_db::Db, text: &str, offset: u32, limit: u32) -> Vec<u64> {
    db.search(&SearchWords::from_text(text), offset, limit)
        .await
        .unwrap()
        .iter()
        .map(|it| it.id.get())
        .collect()
}

#[tokio::test]
async fn search_finds_every_word_stemmed_and_ranks_titles_first() {
    for (test_db, db) in databases().await {
        let kind = test_db.kind();
        db.seed(1_000, 5, &|_| {}).await.unwrap();

        // Every item with "kettle" in its text, and only those.
        let want: Vec<i64> = sqlx::query_scalar(
            "SELECT id FROM items WHERE LOWER(title) LIKE '%kettle%' \
             OR LOWER(description) LIKE '%kettle%' ORDER BY id",
        )
        .fetch_all(db.pool())
        .await
        .unwrap();
        assert!(want.len() > 10, "{kind}");
        let mut got: Vec<i64> = ids(&db, "Kettle", 0, 1_000)
            .await
            .into_iter()
            .map(|id| id as i64)
            .collect();
        got.sort_unstable();
        assert_eq!(got, want, "{kind}");
        // Stemmed: the plural finds them too.
        assert_eq!(
            ids(&db, "kettles", 0, 1_000).await.len(),
            want.len(),
            "{kind}"
        );

        // Every word must match.
        for item in db
            .search(&SearchWords::from_text("wireless kettle"), 0, 1_000)
            .await
            .unwrap()
        {
            let text = format!("{} {}", item.title, item.description).to_lowercase();
            assert!(
                text.contains("wireless") && text.contains("kettle"),
                "{kind}: {text}"
            );
        }

        // A word in the title ranks above the same word in a description.
        add_item(&db, 5_001, "Plain thing", "a zebra, a zebra and a zebra").await;
        add_item(&db, 5_002, "Zebra thing", "plain").await;
        assert_eq!(ids(&db, "zebra", 0, 10).await, [5_002, 5_001], "{kind}");

        // A changed title is found under its new words only.
        sqlx::query("UPDATE items SET title = 'Okapi thing' WHERE id = 5002")
            .execute(db.pool())
            .await
            .unwrap();
        assert_eq!(ids(&db, "okapi", 0, 10).await, [5_002], "{kind}");
        assert_eq!(ids(&db, "zebra", 0, 10).await, [5_001], "{kind}");

        // Pages of 7 put together are the whole answer, each item once.
        let all = ids(&db, "kettle", 0, 1_000).await;
        let mut paged = Vec::new();
        for page in 0.. {
            let got = ids(&db, "kettle", page * 7, 7).await;
            if got.is_empty() {
                break;
            }
            paged.extend(got);
        }
        assert_eq!(paged, all, "{kind}");
    }
}

#[tokio::test]
async fn any_input_is_a_search_not_an_error() {
    for (test_db, db) in databases().await {
        let kind = test_db.kind();
        db.seed(200, 5, &|_| {}).await.unwrap();
        let long = "kettle ".repeat(150);
        for text in [
            "",
            "\"",
            "\"kettle",
            "kettle\"",
            "'; DROP TABLE items; --",
            "kettle OR lamp",
            "NEAR(kettle lamp, 2)",
            "title:kettle",
            "kettle*",
            "-kettle",
            "^kettle",
            "(((",
            "%_%",
            "\\",
            "\u{0}",
            "東京 кухня café ☕",
            "the and of",
            &long,
            &"x".repeat(1_000),
        ] {
            let found = db.search(&SearchWords::from_text(text), 0, 20).await;
            assert!(found.is_ok(), "{kind}: {text:?}: {found:?}");
        }
        // Operators are not operators: "kettle OR lamp" is not a union.
        assert!(ids(&db, "kettle OR lamp", 0, 20).await.is_empty(), "{kind}");
        assert!(!ids(&db, &long, 0, 20).await.is_empty(), "{kind}");
    }
}
