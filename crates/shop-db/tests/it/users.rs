use crate::databases;

#[tokio::test]
async fn passwords_are_checked_against_an_argon2_hash() {
    for (test_db, db) in databases().await {
        let kind = test_db.kind();
        let id = db
            .create_user("erin", "correct horse")
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            db.check_password("erin", "correct horse").await.unwrap(),
            Some(id),
            "{kind}"
        );
        assert_eq!(
            db.check_password("erin", "wrong").await.unwrap(),
            None,
            "{kind}"
        );
        assert_eq!(
            db.check_password("nobody", "correct horse").await.unwrap(),
            None,
            "{kind}"
        );
        assert_eq!(db.user_name(id).await.unwrap().as_deref(), Some("erin"));

        let hash: String =
            sqlx::query_scalar("SELECT password_hash FROM users WHERE name = 'erin'")
                .fetch_one(db.pool())
                .await
                .unwrap();
        assert!(hash.starts_with("$argon2id$"), "{kind}: {hash}");
        assert!(!hash.contains("correct horse"));
    }
}

#[tokio::test]
async fn a_taken_name_is_refused_without_changing_the_user() {
    for (test_db, db) in databases().await {
        db.create_user("finn", "one").await.unwrap().unwrap();
        assert_eq!(
            db.create_user("finn", "two").await.unwrap(),
            None,
            "{}",
            test_db.kind()
        );
        assert!(db.check_password("finn", "one").await.unwrap().is_some());
        assert!(db.check_password("finn", "two").await.unwrap().is_none());
    }
}
