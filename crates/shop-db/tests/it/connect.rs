use shop_db::{Backend, Db, DbError};
use shop_testkit::TestDb;
use sqlx::Row;

use crate::databases;

async fn busy_timeout(pool: &sqlx::AnyPool) -> i64 {
    sqlx::query("PRAGMA busy_timeout")
        .fetch_one(pool)
        .await
        .unwrap()
        .try_get(0)
        .unwrap()
}

#[tokio::test]
async fn sqlite_runs_in_wal_mode_with_busy_timeouts_per_pool() {
    let test_db = TestDb::sqlite();
    let db = Db::connect(test_db.url()).await.unwrap();
    assert_eq!(db.backend(), Backend::Sqlite);
    let mode: String = sqlx::query("PRAGMA journal_mode")
        .fetch_one(db.read_pool())
        .await
        .unwrap()
        .try_get(0)
        .unwrap();
    assert_eq!(mode, "wal");
    // Writes give up on a foreign lock after a second (then 503); reads barely
    // ever meet a lock under WAL and may wait longer when they do.
    assert_eq!(busy_timeout(db.write_pool()).await, 1_000);
    assert_eq!(busy_timeout(db.read_pool()).await, 5_000);
    assert_eq!(db.pool().options().get_max_connections(), 1, "one writer");
}

#[tokio::test]
async fn sqlite_reads_cannot_write() {
    let test_db = TestDb::sqlite();
    let db = Db::connect(test_db.url()).await.unwrap();
    let err =
        sqlx::query("INSERT INTO users (name, password_hash, created_at) VALUES ('x', 'x', 0)")
            .execute(db.read_pool())
            .await
            .unwrap_err();
    assert!(err.to_string().contains("readonly"), "{err}");
}

#[tokio::test]
async fn a_missing_directory_is_created() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("nested/deeper/shop.db");
    let db = Db::connect(&format!("sqlite:{}", path.display()))
        .await
        .unwrap();
    db.ping().await.unwrap();
    assert!(path.exists());
}

#[tokio::test]
async fn migrations_run_once_and_reconnecting_keeps_data() {
    for (test_db, db) in databases().await {
        db.create_user("dora", "pw").await.unwrap().unwrap();
        db.close().await;
        let again = Db::connect(test_db.url()).await.unwrap();
        assert!(
            again.check_password("dora", "pw").await.unwrap().is_some(),
            "{}",
            test_db.kind()
        );
    }
}

#[tokio::test]
async fn an_unknown_url_is_a_clear_error() {
    let err = Db::connect("mysql://localhost/shop").await.unwrap_err();
    assert!(matches!(err, DbError::UnsupportedUrl(_)));
    assert!(err.to_string().contains("sqlite:PATH or postgres://"));
}

#[tokio::test]
async fn a_closed_pool_is_reported_as_unavailable() {
    for (test_db, db) in databases().await {
        db.close().await;
        let err = db.ping().await.unwrap_err();
        assert!(err.is_unavailable(), "{}: {err}", test_db.kind());
    }
}
