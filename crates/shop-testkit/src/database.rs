//! A private database per test: a SQLite file, or a fresh PostgreSQL database.

use std::time::Duration;

use sqlx::Connection;
use sqlx::postgres::PgConnection;
use tempfile::TempDir;

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
