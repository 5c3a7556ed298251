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

#[tokio::test]
async fn an_unknown_name_costs_one_verification_like_a_wrong_password() {
    for (test_db, db) in databases().await {
        let kind = test_db.kind();
        db.create_user("gwen", "right").await.unwrap().unwrap();
        let before = db.password_checks();
        assert_eq!(db.check_password("gwen", "wrong").await.unwrap(), None);
        assert_eq!(db.password_checks(), before + 1, "{kind}: wrong password");
        // No such user, but the same work: a verification against the dummy hash.
        assert_eq!(db.check_password("nobody", "right").await.unwrap(), None);
        assert_eq!(db.password_checks(), before + 2, "{kind}: unknown name");
        assert!(db.check_password("gwen", "right").await.unwrap().is_some());
        assert_eq!(db.password_checks(), before + 3, "{kind}: right password");
    }
}

#[tokio::test]
async fn stored_hashes_stay_standard_argon2id_phc_strings() {
    use argon2::Argon2;
    use argon2::password_hash::rand_core::OsRng;
    use argon2::password_hash::{PasswordHash, PasswordHasher, PasswordVerifier, SaltString};

    for (test_db, db) in databases().await {
        let kind = test_db.kind();
        // A hash written by the stock argon2 API (as earlier versions did) verifies.
        let salt = SaltString::generate(&mut OsRng);
        let stock = Argon2::default()
            .hash_password(b"old password", &salt)
            .unwrap()
            .to_string();
        sqlx::query("INSERT INTO users (name, password_hash, created_at) VALUES ('old', $1, 0)")
            .bind(&stock)
            .execute(db.pool())
            .await
            .unwrap();
        assert!(
            db.check_password("old", "old password")
                .await
                .unwrap()
                .is_some(),
            "{kind}"
        );
        assert!(
            db.check_password("old", "old passwore")
                .await
                .unwrap()
                .is_none(),
            "{kind}"
        );

        // A hash written now has the default parameters, and the stock API accepts it.
        db.create_user("new", "new password")
            .await
            .unwrap()
            .unwrap();
        let hash: String = sqlx::query_scalar("SELECT password_hash FROM users WHERE name = 'new'")
            .fetch_one(db.read_pool())
            .await
            .unwrap();
        assert!(
            hash.starts_with("$argon2id$v=19$m=19456,t=2,p=1$"),
            "{kind}: {hash}"
        );
        let parsed = PasswordHash::new(&hash).unwrap();
        assert!(
            Argon2::default()
                .verify_password(b"new password", &parsed)
                .is_ok()
        );
        assert!(
            Argon2::default()
                .verify_password(b"new passwore", &parsed)
                .is_err()
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn no_more_hashes_run_at_once_than_there_are_cores() {
    let (_test_db, db) = crate::databases().await.remove(0);
    db.create_user("hana", "right").await.unwrap().unwrap();
    let limit = shop_db::users::hashing_stats().limit;
    let cores = std::thread::available_parallelism().unwrap().get();
    assert_eq!(limit, cores);
    // 16 logins at once, half for a name that does not exist.
    let logins = (0..16).map(|i| {
        let db = db.clone();
        tokio::spawn(async move {
            let name = if i % 2 == 0 { "hana" } else { "nobody" };
            db.check_password(name, &format!("wrong-{i}")).await
        })
    });
    let mut watched = 0;
    let all = futures::future::join_all(logins);
    tokio::pin!(all);
    let outcomes = loop {
        tokio::select! {
            outcomes = &mut all => break outcomes,
            _ = tokio::time::sleep(std::time::Duration::from_millis(2)) => {
                let now = shop_db::users::hashing_stats();
                assert!(now.in_flight <= limit, "{now:?}");
                watched += 1;
            }
        }
    };
    assert!(outcomes.into_iter().all(|o| o.unwrap().unwrap().is_none()));
    let stats = shop_db::users::hashing_stats();
    // Process-wide, so other tests' hashing counts too: the bound holds for all of it.
    assert!(
        stats.max_in_flight >= 1 && stats.max_in_flight <= limit,
        "{stats:?}"
    );
    assert!(
        stats.buffers <= limit,
        "one reusable buffer per permit: {stats:?}"
    );
    assert!(watched > 0);
}
