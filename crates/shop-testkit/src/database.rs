//! A private database per test: a SQLite file, or a fresh PostgreSQL database; and
//! SQLite's write lock held as another process would hold it.

use std::thread;
use std::time::Duration;

use sqlx::Connection;
use sqlx::postgres::PgConnection;
use sqlx::sqlite::{SqliteConnectOptions, SqliteConnection};
use tempfile::TempDir;
use tokio::sync::oneshot;

/// The environment variable naming the PostgreSQL server tests create databases on.
pub const POSTGRES_ENV: &str = "SHOP_TEST_POSTGRES_URL";
/// Where that server is by default (this project's machines run one there).
const DEFAULT_POSTGRES: &str = "postgres://postgres@127.0.0.1:5432/postgres";

/// A database owned by one test, gone when dropped.
pub struct TestDb {
    url: String,
    kind: &'static str,
    _dir: Option<TempDir>,
    postgres: Option<(String, String)>,
}

impl TestDb {
    /// A new SQLite file in its own temporary directory.
    pub fn sqlite() -> Self {
        let dir = tempfile::Builder::new()
            .prefix("shop-db-")
            .tempdir()
            .expect("create a temporary directory");
        let url = format!("sqlite:{}", dir.path().join("shop.db").display());
        Self {
            url,
            kind: "sqlite",
            _dir: Some(dir),
            postgres: None,
        }
    }

    /// A new SQLite file in `dir`, which the caller owns (a [`SmallDisk`] to fill
    /// up, say).
    ///
    /// [`SmallDisk`]: crate::SmallDisk
    pub fn sqlite_in(dir: &std::path::Path) -> Self {
        Self {
            url: format!("sqlite:{}", dir.join("shop.db").display()),
            kind: "sqlite",
            _dir: None,
            postgres: None,
        }
    }

    /// A new, empty PostgreSQL database on the local server, or `None` (said loudly
    /// on stderr) when no server answers. Under `CI=true` no server is a failure.
    pub async fn postgres() -> Option<Self> {
        let admin = std::env::var(POSTGRES_ENV).unwrap_or_else(|_| DEFAULT_POSTGRES.to_owned());
        let connect = tokio::time::timeout(Duration::from_secs(5), PgConnection::connect(&admin));
        let mut conn = match connect.await {
            Ok(Ok(conn)) => conn,
            outcome => {
                let why = match outcome {
                    Ok(Err(e)) => e.to_string(),
                    _ => "timed out".to_owned(),
                };
                if std::env::var("CI").is_ok_and(|v| v == "true") {
                    panic!("CI=true and PostgreSQL is unreachable at {admin}: {why}");
                }
                // Written straight to the process's stderr: the test harness captures
                // eprintln! of passing tests, and a skip must not go unnoticed.
                let _ = std::io::Write::write_all(
                    &mut std::io::stderr(),
                    format!(
                        "\n*** SKIPPING the PostgreSQL half of a test: no server at {admin} ({why}).\n\
                         *** Start one, or set {POSTGRES_ENV}. Under CI=true this is a failure.\n"
                    )
                    .as_bytes(),
                );
                return None;
            }
        };
        let mut bytes = [0u8; 8];
        getrandom::fill(&mut bytes).expect("OS random source");
        let name = format!("shop_test_{}", u64::from_le_bytes(bytes));
        sqlx::query(&format!("CREATE DATABASE {name}"))
            .execute(&mut conn)
            .await
            .expect("create a test database");
        let _ = conn.close().await;
        let base = admin.rsplit_once('/').map(|(b, _)| b).unwrap_or(&admin);
        Some(Self {
            url: format!("{base}/{name}"),
            kind: "postgres",
            _dir: None,
            postgres: Some((admin, name)),
        })
    }

    /// SQLite always, and PostgreSQL where a server answers: run the same test on each.
    pub async fn all() -> Vec<Self> {
        let mut dbs = vec![Self::sqlite()];
        dbs.extend(Self::postgres().await);
        dbs
    }

    /// The URL to give the code under test.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// `"sqlite"` or `"postgres"`, for assertion messages.
    pub fn kind(&self) -> &'static str {
        self.kind
    }

    /// Takes this SQLite database's write lock from a connection of its own, as
    /// another process writing would, and holds it until the guard is released or
    /// dropped. Returns once the lock is held. For tests without a runtime: from
    /// async code use [`TestDb::hold_write_lock_async`] (this one panics there).
    pub fn hold_write_lock(&self) -> SqliteWriteLock {
        let (lock, taken) = SqliteWriteLock::start(self.sqlite_path());
        lock.wait(taken.blocking_recv())
    }

    /// [`TestDb::hold_write_lock`] for async tests: waits for the lock without
    /// blocking the test's runtime.
    pub async fn hold_write_lock_async(&self) -> SqliteWriteLock {
        let (lock, taken) = SqliteWriteLock::start(self.sqlite_path());
        lock.wait(taken.await)
    }

    fn sqlite_path(&self) -> String {
        assert_eq!(self.kind, "sqlite", "a write lock is for a SQLite database");
        self.url
            .strip_prefix("sqlite:")
            .expect("a SQLite URL")
            .to_owned()
    }
}

/// A reader in a long read transaction on a SQLite file (a report, a backup): it
/// keeps the WAL from being reset, so every commit must grow the file. Ends with
/// [`SqliteWalPin::release`], or when dropped.
pub struct SqliteWalPin(SqliteConnection);

impl TestDb {
    /// Opens a read transaction on this SQLite database from a connection of its
    /// own and keeps it open (see [`SqliteWalPin`]).
    pub async fn pin_wal(&self) -> SqliteWalPin {
        let options = SqliteConnectOptions::new().filename(self.sqlite_path());
        let mut conn = SqliteConnection::connect_with(&options)
            .await
            .expect("open a reader");
        sqlx::query("BEGIN")
            .execute(&mut conn)
            .await
            .expect("begin a read");
        sqlx::query("SELECT COUNT(*) FROM sqlite_master")
            .execute(&mut conn)
            .await
            .expect("read, which takes the snapshot");
        SqliteWalPin(conn)
    }
}

impl SqliteWalPin {
    /// Ends the read transaction and closes the connection.
    pub async fn release(mut self) {
        sqlx::query("ROLLBACK")
            .execute(&mut self.0)
            .await
            .expect("end the read");
        let _ = self.0.close().await;
    }
}

/// SQLite's write lock (`BEGIN IMMEDIATE`) held by a connection outside the code
/// under test, until [`SqliteWriteLock::release`] or drop rolls it back.
///
/// The connection lives on a thread with a runtime of its own, so the lock is the
/// same from a test without a runtime (the drills) and from an async test on any
/// runtime: holding it never depends on the test's runtime making progress.
pub struct SqliteWriteLock {
    release: Option<oneshot::Sender<()>>,
    holder: Option<thread::JoinHandle<()>>,
}

impl SqliteWriteLock {
    /// Starts the holder; the receiver hears when the lock is taken.
    fn start(path: String) -> (Self, oneshot::Receiver<()>) {
        let (taken_tx, taken_rx) = oneshot::channel();
        let (release_tx, release_rx) = oneshot::channel::<()>();
        let holder = thread::Builder::new()
            .name("sqlite-write-lock".to_owned())
            .spawn(move || {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("a runtime for the write lock's connection");
                rt.block_on(async move {
                    let options = SqliteConnectOptions::new().filename(&path);
                    let mut conn = SqliteConnection::connect_with(&options)
                        .await
                        .unwrap_or_else(|e| panic!("connect to {path}: {e}"));
                    sqlx::query("BEGIN IMMEDIATE")
                        .execute(&mut conn)
                        .await
                        .expect("take SQLite's write lock");
                    let _ = taken_tx.send(());
                    // Released, or the guard is gone: either way, let go.
                    let _ = release_rx.await;
                    sqlx::query("ROLLBACK")
                        .execute(&mut conn)
                        .await
                        .expect("release SQLite's write lock");
                    let _ = conn.close().await;
                });
            })
            .expect("spawn the write lock's thread");
        let lock = Self {
            release: Some(release_tx),
            holder: Some(holder),
        };
        (lock, taken_rx)
    }

    /// The lock once taken, or the holder's panic (it could not take it).
    fn wait(mut self, taken: Result<(), oneshot::error::RecvError>) -> Self {
        if taken.is_err() {
            if let Some(Err(panic)) = self.holder.take().map(thread::JoinHandle::join) {
                std::panic::resume_unwind(panic);
            }
            panic!("the write lock's thread ended without taking the lock");
        }
        self
    }

    /// Rolls back and returns once the lock is gone (a rollback: milliseconds, on
    /// the holder's thread). Dropping the guard does the same.
    pub fn release(self) {
        drop(self);
    }
}

impl Drop for SqliteWriteLock {
    fn drop(&mut self) {
        drop(self.release.take());
        if let Some(Err(panic)) = self.holder.take().map(thread::JoinHandle::join)
            && !thread::panicking()
        {
            std::panic::resume_unwind(panic);
        }
    }
}

impl Drop for TestDb {
    fn drop(&mut self) {
        let Some((admin, name)) = self.postgres.take() else {
            return;
        };
        // Drop runs outside any runtime guarantee: use a thread with its own.
        let dropped = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .ok()?;
            rt.block_on(async {
                let mut conn = PgConnection::connect(&admin).await.ok()?;
                sqlx::query(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
                    .execute(&mut conn)
                    .await
                    .ok()
            })
        })
        .join();
        if !matches!(dropped, Ok(Some(_))) {
            eprintln!("warning: could not drop test database; drop it by hand");
        }
    }
}
