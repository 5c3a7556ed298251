//! Opening the database: the URL decides the backend; migrations run at connect.

use std::path::Path;
use std::sync::Once;
use std::time::Duration;

use sqlx::AnyPool;
use sqlx::any::AnyPoolOptions;

use crate::DbError;

/// Which database is behind a [`Db`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// An embedded SQLite file.
    Sqlite,
    /// A PostgreSQL server.
    Postgres,
}

/// A pool of connections to the shop's database. Clone it freely.
#[derive(Debug, Clone)]
pub struct Db {
    pub(crate) pool: AnyPool,
    backend: Backend,
}

/// How long SQLite waits for another writer before failing with "database is locked".
const SQLITE_BUSY_TIMEOUT_MS: u32 = 10_000;
/// How long a caller waits for a free connection before the pool gives up.
const ACQUIRE_TIMEOUT: Duration = Duration::from_secs(10);

static DRIVERS: Once = Once::new();

impl Db {
    /// Connects to `url` (`sqlite:PATH`, `sqlite://PATH`, or `postgres://...`),
    /// creating a SQLite file and its directory if missing, and migrates it.
    pub async fn connect(url: &str) -> Result<Self, DbError> {
        DRIVERS.call_once(sqlx::any::install_default_drivers);
        let (backend, url) = if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            (Backend::Postgres, url.to_owned())
        } else if let Some(path) = url
            .strip_prefix("sqlite://")
            .or_else(|| url.strip_prefix("sqlite:"))
        {
            let path = path.split('?').next().unwrap_or(path);
            if let Some(dir) = Path::new(path)
                .parent()
                .filter(|d| !d.as_os_str().is_empty())
            {
                std::fs::create_dir_all(dir).map_err(sqlx::Error::Io)?;
            }
            (Backend::Sqlite, format!("sqlite://{path}?mode=rwc"))
        } else {
            return Err(DbError::UnsupportedUrl(url.to_owned()));
        };
        let mut options = AnyPoolOptions::new().acquire_timeout(ACQUIRE_TIMEOUT);
        if backend == Backend::Sqlite {
            options = options.max_connections(8).after_connect(|conn, _meta| {
                Box::pin(async move {
                    for pragma in [
                        "PRAGMA journal_mode = WAL".to_owned(),
                        "PRAGMA synchronous = NORMAL".to_owned(),
                        "PRAGMA foreign_keys = ON".to_owned(),
                        format!("PRAGMA busy_timeout = {SQLITE_BUSY_TIMEOUT_MS}"),
                    ] {
                        sqlx::query(&pragma).execute(&mut *conn).await?;
                    }
                    Ok(())
                })
            });
        }
        let pool = options.connect(&url).await?;
        let db = Self { pool, backend };
        db.migrate().await?;
        Ok(db)
    }

    async fn migrate(&self) -> Result<(), DbError> {
        match self.backend {
            Backend::Sqlite => sqlx::migrate!("migrations/sqlite").run(&self.pool).await?,
            Backend::Postgres => {
                sqlx::migrate!("migrations/postgres")
                    .run(&self.pool)
                    .await?
            }
        }
        Ok(())
    }

    /// The connection pool, for tools and tests that need SQL of their own.
    pub fn pool(&self) -> &AnyPool {
        &self.pool
    }

    /// Which database this is.
    pub fn backend(&self) -> Backend {
        self.backend
    }

    /// Closes every connection; later calls fail as if the database were down.
    pub async fn close(&self) {
        self.pool.close().await;
    }

    /// Answers when the database does (for `/healthz`).
    pub async fn ping(&self) -> Result<(), DbError> {
        sqlx::query("SELECT 1").execute(&self.pool).await?;
        Ok(())
    }
}
