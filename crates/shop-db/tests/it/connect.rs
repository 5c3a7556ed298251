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

/// A SQLite file moved away under a running server (by an operator, a restore
/// in progress): connections opened meanwhile make no new, empty database at its
/// path (one would be answered from, and its closing would delete the real
/// file's WAL once the file is back), the health ping fails as unavailable, and
/// all is well again once the file is back.
#[tokio::test]
async fn a_sqlite_file_moved_away_is_never_made_again_empty() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("shop.db");
    let db = Db::connect(&format!("sqlite:{}", path.display()))
        .await
        .unwrap();
    db.ping().await.unwrap();
    sqlx::query("INSERT INTO users (name, password_hash, created_at) VALUES ('kept', 'x', 0)")
        .execute(db.write_pool())
        .await
        .unwrap();
    let away = dir.path().join("away");
    std::fs::create_dir(&away).unwrap();
    let files = ["shop.db", "shop.db-wal", "shop.db-shm"];
    for file in files {
        std::fs::rename(dir.path().join(file), away.join(file)).unwrap();
    }
    let error = db.ping().await.unwrap_err();
    assert!(error.is_unavailable(), "{error}");
    assert!(error.to_string().contains("shop.db"), "{error}");
    // Every read connection at once: the pool opens new ones, which find no file.
    let opened = futures::future::join_all((0..8).map(|_| db.read_pool().acquire())).await;
    assert!(
        opened.iter().any(Result::is_err),
        "new connections opened a file"
    );
    drop(opened);
    assert!(!path.exists(), "an empty database was made at the path");
    for file in files {
        std::fs::rename(away.join(file), dir.path().join(file)).unwrap();
    }
    db.ping().await.unwrap();
    let opened = futures::future::join_all((0..8).map(|_| db.read_pool().acquire())).await;
    assert!(opened.iter().all(Result::is_ok));
    drop(opened);
    let names: i64 = sqlx::query("SELECT COUNT(*) FROM users WHERE name = 'kept'")
        .fetch_one(db.read_pool())
        .await
        .unwrap()
        .try_get(0)
        .unwrap();
    assert_eq!(names, 1);
    db.close().await;
    // What the server wrote is in the file at the path.
    let again = Db::connect(&format!("sqlite:{}", path.display()))
        .await
        .unwrap();
    let names: i64 = sqlx::query("SELECT COUNT(*) FROM users WHERE name = 'kept'")
        .fetch_one(again.read_pool())
        .await
        .unwrap()
        .try_get(0)
        .unwrap();
    assert_eq!(names, 1);
}

/// The health ping reads the shop's own tables: an empty database answers
/// `SELECT 1` but is no shop's.
#[tokio::test]
async fn the_ping_fails_on_a_database_without_the_shops_tables() {
    for (_test_db, db) in databases().await {
        db.ping().await.unwrap();
        sqlx::query("DROP TABLE write_probe")
            .execute(db.write_pool())
            .await
            .unwrap();
        assert!(db.ping().await.is_err(), "{:?}", db.backend());
    }
}

/// A PostgreSQL server gone away (every connection closed, new ones refused),
/// or stalled, is waited for once, not by every statement: after the first
/// finds it gone, reads and writes fail at once as unavailable (not busy),
/// until one a second finds it back; then they work again, by themselves.
#[tokio::test]
async fn a_database_gone_away_is_not_waited_for_by_every_statement() {
    let Some(test_db) = TestDb::postgres().await else {
        return;
    };
    let url = test_db.url();
    let server = url
        .split_once("://")
        .map(|(_, rest)| rest.rsplit_once('@').map_or(rest, |(_, host)| host))
        .and_then(|rest| rest.split('/').next())
        .unwrap()
        .to_owned();
    let proxy = shop_testkit::TcpProxy::to(&server);
    let db = Db::connect(&url.replace(&server, proxy.addr()))
        .await
        .unwrap();
    assert_eq!(db.item_count().await.unwrap(), 0);

    proxy.cut();
    // The first finds it gone (its connection closed, none opened in time).
    let first = db.item_count().await.unwrap_err();
    assert!(first.is_unavailable(), "{first}");
    // Forty statements, each of which waited out the pool's acquire timeout
    // (2 to 5 s) before: each fails at once but the one a second that tries
    // the database again (it waits as before), so two statements that waited
    // are a second apart or more.
    let mut tried = std::time::Instant::now();
    let mut fast = 0;
    for i in 0..40 {
        let started = std::time::Instant::now();
        let error = if i % 2 == 0 {
            db.item_count().await.unwrap_err()
        } else {
            db.begin_write().await.err().expect("no write connection")
        };
        assert!(error.is_unavailable() && !error.is_busy(), "{error}");
        if error.failed_fast() {
            fast += 1;
            continue;
        }
        let apart = started - tried;
        assert!(
            apart >= std::time::Duration::from_millis(900),
            "two statements tried the database {apart:?} apart"
        );
        tried = std::time::Instant::now();
    }
    assert!(fast >= 20, "{fast} of 40 failed at once");

    proxy.mend();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(15);
    loop {
        match db.item_count().await {
            Ok(0) => break,
            other => assert!(
                std::time::Instant::now() < deadline,
                "never back: {other:?}"
            ),
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert!(
        db.create_user("back", "password-1")
            .await
            .unwrap()
            .is_some()
    );

    // A server that stalls (stopped, a network black hole): found too, its
    // own connection not answered; back by itself once it answers again.
    proxy.stall();
    let first = db.item_count().await.unwrap_err();
    assert!(first.is_unavailable(), "{first}");
    // Failed at once after it (a try of the database again, should one fall
    // due on a loaded machine, is followed by one).
    let mut fast = false;
    for _ in 0..3 {
        fast |= db.item_count().await.unwrap_err().failed_fast();
    }
    assert!(fast, "the stall was never found");
    proxy.resume();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(15);
    while db.item_count().await.is_err() {
        assert!(std::time::Instant::now() < deadline, "never back");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    db.close().await;
    drop(proxy);
    drop(test_db);
}

/// A PostgreSQL whose write connections are all held (long transactions) is
/// busy, not gone: a write that waits past the timeout says so (busy), and the
/// gate stays open: reads go on.
#[tokio::test]
async fn a_busy_pool_does_not_close_the_gate() {
    let Some(test_db) = TestDb::postgres().await else {
        return;
    };
    let db = Db::connect(test_db.url()).await.unwrap();
    let pool_size = db.write_pool().options().get_max_connections();
    let mut held = Vec::new();
    for _ in 0..pool_size {
        held.push(
            db.begin_write()
                .await
                .unwrap_or_else(|e| panic!("a write connection: {e}")),
        );
    }
    let waited = db
        .begin_write()
        .await
        .err()
        .expect("no write connection free");
    assert!(waited.is_busy(), "{waited}");
    for _ in 0..5 {
        assert_eq!(db.item_count().await.unwrap(), 0, "reads go on");
    }
    drop(held);
    drop(db);
    drop(test_db);
}
