//! Opening the database: the URL decides the backend; migrations run at connect.
//!
//! A [`Db`] holds two pools. Writes (checkout, flash purchases, new users, seeding,
//! migrations) go through a small write pool that gives up quickly: SQLite has one
//! writer per file anyway, and a write lock held elsewhere (another process, a
//! long maintenance transaction) must turn into a fast "unavailable" (503, retry),
//! not requests piling up behind a 10 s busy timeout. Reads (item pages, the home
//! page, logins, the row cache, `/healthz`) go through their own pool, so waiting
//! writers can never take the connections reads need; under SQLite's WAL mode reads
//! do not wait for the writer at all. Every write is a [`WriteTx`] (see
//! [`crate::write`]): a connection whose write failed is closed, never reused.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::Once;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use sqlx::any::AnyPoolOptions;
use sqlx::{AnyPool, Connection};

use crate::DbError;
use crate::write::{WriteTx, connection_is_clean};

/// Which database is behind a [`Db`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// An embedded SQLite file.
    Sqlite,
    /// A PostgreSQL server.
    Postgres,
}

/// The shop's database: a read pool and a write pool. Clone it freely.
#[derive(Debug, Clone)]
pub struct Db {
    /// Statements that change nothing.
    pub(crate) read: crate::gate::Gated,
    /// Transactions and statements that write.
    pub(crate) write: crate::gate::Gated,
    backend: Backend,
    /// Argon2 verifications run by `check_password` (see [`Db::password_checks`]).
    pub(crate) password_checks: Arc<AtomicU64>,
    /// Write transactions committed through this handle (see [`Db::commits`]).
    pub(crate) commits: Arc<AtomicU64>,
    /// Uses of a read connection (see [`Db::reads`]).
    reads: Arc<AtomicU64>,
    /// The SQLite file opened (none for PostgreSQL), checked by [`Db::ping`].
    file: Option<Arc<OpenedFile>>,
}

/// The SQLite file a [`Db`] opened, told from any other file at its path by
/// its device and inode: the file moved away, removed or replaced under a
/// running server leaves its connections on the old file while new ones would
/// open the one at the path (or none), so [`Db::ping`] fails until the file is
/// back, and says so once.
#[derive(Debug)]
struct OpenedFile {
    path: PathBuf,
    id: (u64, u64),
    /// The error was logged and not yet said to be over.
    said: AtomicBool,
}

impl OpenedFile {
    /// The file at `path` now; `None` where a file cannot be told from
    /// another (no device and inode).
    fn open(path: &Path) -> Option<Self> {
        Some(Self {
            path: path.to_owned(),
            id: file_id(path)?,
            said: AtomicBool::new(false),
        })
    }

    fn check(&self) -> Result<(), DbError> {
        let path = self.path.display();
        if file_id(&self.path) == Some(self.id) {
            if self.said.swap(false, Ordering::Relaxed) {
                tracing::info!(%path, "the database file this server opened is back at its path");
            }
            return Ok(());
        }
        if !self.said.swap(true, Ordering::Relaxed) {
            tracing::error!(
                %path,
                "the database file this server opened is no longer at its path (moved, removed \
                 or replaced): put it back, or restart the server to open the file there now"
            );
        }
        Err(DbError::FileMoved(self.path.clone()))
    }
}

/// The device and inode of the file at `path`, if there is one.
#[cfg(unix)]
fn file_id(path: &Path) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path).ok().map(|m| (m.dev(), m.ino()))
}

/// Elsewhere a file cannot be told from another: [`Db::ping`] does not check it.
#[cfg(not(unix))]
fn file_id(_path: &Path) -> Option<(u64, u64)> {
    None
}

/// SQLite write connections. One: SQLite admits a single writer per file, so more
/// connections would only wait for each other inside SQLite's busy handler (which
/// polls with sleeps) instead of in the pool's fair queue.
const SQLITE_WRITE_CONNECTIONS: u32 = 1;
/// SQLite read connections (WAL readers run in parallel with each other and the writer).
const SQLITE_READ_CONNECTIONS: u32 = 8;
/// How much of the database file a SQLite read connection maps into memory (its
/// first 256 MiB; pages past it are read as before). A read then touches
/// the operating system's page cache, shared by every connection, instead of a
/// system call and a copy into the connection's own 2 MiB cache for each page not
/// there: the row refresher's batches of ids from all over the table read 1.3-1.4x
/// as many rows a second (BENCHMARKS.md, "scattered ids"). Only reads: SQLite writes
/// through its usual calls, so a full disk is still a write's error. A read error
/// of the disk itself would stop the process (a signal, not an error), as it would
/// for any mapped file.
const SQLITE_READ_MMAP_BYTES: u64 = 256 << 20;
/// PostgreSQL write connections: enough for row-level concurrency, few enough that
/// writers queued behind a lock cannot use up the server's connection slots.
const POSTGRES_WRITE_CONNECTIONS: u32 = 5;
/// PostgreSQL read connections.
const POSTGRES_READ_CONNECTIONS: u32 = 10;

/// How long a SQLite write waits for a write lock held elsewhere (another process)
/// before failing with "database is locked", which callers see as unavailable. Our
/// own writers queue in the pool instead, so this only covers foreign lock holders,
/// whose normal transactions (a seed batch, `shop sale start`) take milliseconds.
const SQLITE_WRITE_BUSY_TIMEOUT_MS: u32 = 1_000;
/// How long a SQLite read waits on a lock. Under WAL readers only meet one in rare
/// moments (recovery after a crash, a WAL reset); waiting out those is right.
const SQLITE_READ_BUSY_TIMEOUT_MS: u32 = 5_000;
/// How long a PostgreSQL write waits for a row or table lock before giving up
/// (SQLSTATE 55P03, unavailable): the counterpart of SQLite's write busy timeout.
const POSTGRES_LOCK_TIMEOUT: &str = "2s";
/// How long a PostgreSQL read waits for a lock before giving up (55P03).
const POSTGRES_READ_LOCK_TIMEOUT: &str = "2s";
/// How long a writer waits for the write connection. Together with the busy timeout
/// this bounds a write's wait when the database is locked: about 3 s, then 503.
const WRITE_ACQUIRE_TIMEOUT: Duration = Duration::from_secs(2);
/// How long a reader waits for a free read connection before the pool gives up.
const READ_ACQUIRE_TIMEOUT: Duration = Duration::from_secs(5);
/// How long the write probe waits for the write connection (see [`Db::probe_write`]).
const PROBE_ACQUIRE_TIMEOUT: Duration = Duration::from_millis(300);
/// How long the write probe lets SQLite wait for the write lock.
const PROBE_BUSY_TIMEOUT_MS: u32 = 100;

static DRIVERS: Once = Once::new();

/// The file a `sqlite:PATH` or `sqlite://PATH` URL names (its query left out);
/// `None` for any other URL.
pub fn sqlite_path(url: &str) -> Option<&str> {
    let path = url
        .strip_prefix("sqlite://")
        .or_else(|| url.strip_prefix("sqlite:"))?;
    path.split('?').next()
}

impl Db {
    /// Connects to `url` (`sqlite:PATH`, `sqlite://PATH`, or `postgres://...`),
    /// creating a SQLite file and its directory if missing, and migrates it.
    pub async fn connect(url: &str) -> Result<Self, DbError> {
        DRIVERS.call_once(sqlx::any::install_default_drivers);
        let (backend, url) = if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            (Backend::Postgres, url.to_owned())
        } else if let Some(path) = sqlite_path(url) {
            create_sqlite(path).await?;
            // Never `rwc` past this point: a connection opened while the file is
            // away (moved, a restore in progress) would make a new, empty
            // database at its path, which the reads would then see, and which
            // deletes the real file's WAL as it closes. Without the file, a
            // new connection fails (503) until it is back.
            (Backend::Sqlite, format!("sqlite://{path}?mode=rw"))
        } else {
            return Err(DbError::UnsupportedUrl(url.to_owned()));
        };
        // The write pool first: it turns WAL on (a persistent setting), which
        // the read connections then find.
        let write = write_pool(backend).connect(&url).await?;
        let reads = Arc::<AtomicU64>::default();
        let read = read_pool(backend, reads.clone()).connect(&url).await?;
        // One gate for both pools: what one finds unreachable, the other is too.
        let write = crate::gate::Gated::new(write, backend == Backend::Postgres);
        let read = write.beside(read);
        let file = sqlite_path(&url)
            .and_then(|path| OpenedFile::open(Path::new(path)))
            .map(Arc::new);
        let db = Self {
            read,
            write,
            backend,
            password_checks: Arc::default(),
            commits: Arc::default(),
            reads,
            file,
        };
        db.migrate().await?;
        Ok(db)
    }

    async fn migrate(&self) -> Result<(), DbError> {
        match self.backend {
            Backend::Sqlite => {
                sqlx::migrate!("migrations/sqlite")
                    .run(self.write.pool())
                    .await?
            }
            Backend::Postgres => {
                sqlx::migrate!("migrations/postgres")
                    .run(self.write.pool())
                    .await?
            }
        }
        Ok(())
    }

    /// The write pool, for tools and tests that need SQL of their own (it can read
    /// too, but plain reads should use [`Db::read_pool`] so they never queue behind
    /// writers). Writes that confirm something belong in a [`Db::begin_write`]
    /// transaction instead.
    pub fn pool(&self) -> &AnyPool {
        self.write.pool()
    }

    /// The pool for statements that write: small, and quick to give up.
    pub fn write_pool(&self) -> &AnyPool {
        self.write.pool()
    }

    /// The pool for statements that only read (read-only on SQLite).
    pub fn read_pool(&self) -> &AnyPool {
        self.read.pool()
    }

    /// Which database this is.
    pub fn backend(&self) -> Backend {
        self.backend
    }

    /// How many write transactions have committed through this handle (and its
    /// clones) since it connected: a health check that saw writes fail learns from
    /// it whether any write went through since.
    pub fn commits(&self) -> u64 {
        self.commits.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// How many times a read connection was handed out through this handle (and
    /// its clones) since it connected: each read statement (or a few run on one
    /// connection) counts one, before it runs. What tells a cached path from one that reads the
    /// database (`shop_db_reads_total` in the metrics).
    pub fn reads(&self) -> u64 {
        self.reads.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Closes every connection; later calls fail as if the database were down.
    pub async fn close(&self) {
        self.write.pool().close().await;
        self.read.pool().close().await;
    }

    /// Answers when the database answers reads of the shop's own tables (for
    /// `/healthz`): an empty database, or on SQLite another file than the one
    /// opened at its path ([`DbError::FileMoved`]), fails.
    pub async fn ping(&self) -> Result<(), DbError> {
        if let Some(file) = &self.file {
            file.check()?;
        }
        sqlx::query("SELECT 1 FROM write_probe")
            .execute(&self.read)
            .await?;
        Ok(())
    }

    /// Answers within about half a second whether a write can be committed now (for
    /// `/healthz`, which reports a database that reads but cannot write).
    ///
    /// A real write, so every reason a checkout could fail shows (a lock held
    /// elsewhere, a full disk, a read-only file, a lost server): it takes the write
    /// connection (waiting at most 300 ms) and updates the one row of `write_probe`
    /// in a [`WriteTx`](crate::write::WriteTx), on SQLite with a 100 ms busy wait.
    /// Errors are those of a write: [`DbError::is_unavailable`] is true for a lock.
    pub async fn probe_write(&self) -> Result<(), DbError> {
        // In its own task: a caller that gives up (a health check's timeout) must not
        // cut the probe half-way.
        tokio::spawn(probe_write(
            self.write.pool().clone(),
            self.backend,
            self.commits.clone(),
        ))
        .await
        .map_err(|_| sqlx::Error::WorkerCrashed)?
    }
}

/// Makes the SQLite file at `path` if there is none (with its directory), with
/// WAL on: the one connection that may create it.
async fn create_sqlite(path: &str) -> Result<(), DbError> {
    if Path::new(path).exists() {
        return Ok(());
    }
    if let Some(dir) = Path::new(path)
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
    {
        std::fs::create_dir_all(dir).map_err(sqlx::Error::Io)?;
    }
    let mut conn = sqlx::AnyConnection::connect(&format!("sqlite://{path}?mode=rwc")).await?;
    sqlx::query("PRAGMA journal_mode = WAL")
        .execute(&mut conn)
        .await?;
    conn.close().await?;
    Ok(())
}

async fn probe_write(
    write: AnyPool,
    backend: Backend,
    commits: Arc<AtomicU64>,
) -> Result<(), DbError> {
    let mut conn = tokio::time::timeout(PROBE_ACQUIRE_TIMEOUT, write.acquire())
        .await
        .map_err(|_| sqlx::Error::PoolTimedOut)??;
    if backend == Backend::Sqlite {
        sqlx::query(&format!("PRAGMA busy_timeout = {PROBE_BUSY_TIMEOUT_MS}"))
            .execute(&mut *conn)
            .await?;
    }
    let mut tx = WriteTx::begin(conn, backend, commits).await?;
    sqlx::query("UPDATE write_probe SET probed_at = $1 WHERE id = 1")
        .bind(crate::unix_now())
        .execute(&mut *tx)
        .await?;
    let mut conn = tx.commit_keeping().await?;
    if backend == Backend::Sqlite {
        let restored = sqlx::query(&format!(
            "PRAGMA busy_timeout = {SQLITE_WRITE_BUSY_TIMEOUT_MS}"
        ))
        .execute(&mut *conn)
        .await;
        if restored.is_err() {
            // A connection left with the probe's busy timeout must not serve writers.
            conn.close_on_drop();
        }
        restored?;
    }
    Ok(())
}

/// Runs a new SQLite connection's settings, in order.
async fn pragmas<const N: usize>(
    conn: &mut sqlx::AnyConnection,
    pragmas: [String; N],
) -> Result<(), sqlx::Error> {
    for pragma in pragmas {
        sqlx::query(&pragma).execute(&mut *conn).await?;
    }
    Ok(())
}

/// The write pool's options for `backend` (see the constants above for the sizes).
fn write_pool(backend: Backend) -> AnyPoolOptions {
    let options = AnyPoolOptions::new()
        .acquire_timeout(WRITE_ACQUIRE_TIMEOUT)
        // Every connection given back is checked, and one left inside a
        // transaction is closed (so it is never handed out again).
        .after_release(move |conn, _meta| Box::pin(connection_is_clean(conn, backend)));
    match backend {
        Backend::Sqlite => options
            .max_connections(SQLITE_WRITE_CONNECTIONS)
            .after_connect(|conn, _meta| {
                Box::pin(pragmas(
                    conn,
                    [
                        "PRAGMA journal_mode = WAL".to_owned(),
                        "PRAGMA synchronous = NORMAL".to_owned(),
                        "PRAGMA foreign_keys = ON".to_owned(),
                        format!("PRAGMA busy_timeout = {SQLITE_WRITE_BUSY_TIMEOUT_MS}"),
                    ],
                ))
            }),
        Backend::Postgres => options
            .max_connections(POSTGRES_WRITE_CONNECTIONS)
            .after_connect(|conn, _meta| {
                Box::pin(async move {
                    sqlx::query(&format!("SET lock_timeout = '{POSTGRES_LOCK_TIMEOUT}'"))
                        .execute(&mut *conn)
                        .await?;
                    // A confirmed order must survive a crash of the database's
                    // machine: whatever the server's default, COMMIT returns only
                    // once the transaction is flushed to its WAL on disk.
                    sqlx::query("SET synchronous_commit = on")
                        .execute(&mut *conn)
                        .await?;
                    Ok(())
                })
            }),
    }
}

/// The read pool's options for `backend`. SQLite read connections are `query_only`,
/// so a write sent to the wrong pool fails at once instead of taking the write lock,
/// and read the file through a memory map ([`SQLITE_READ_MMAP_BYTES`]). Each
/// connection handed out counts in `reads` before the statement runs (an idle one
/// as it is acquired, a new one as it connects).
fn read_pool(backend: Backend, reads: Arc<AtomicU64>) -> AnyPoolOptions {
    let count = move || {
        reads.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    };
    let on_acquire = count.clone();
    let options = AnyPoolOptions::new()
        .acquire_timeout(READ_ACQUIRE_TIMEOUT)
        .before_acquire(move |_conn, _meta| {
            on_acquire();
            Box::pin(async { Ok(true) })
        });
    match backend {
        Backend::Sqlite => options
            .max_connections(SQLITE_READ_CONNECTIONS)
            .after_connect(move |conn, _meta| {
                count();
                Box::pin(pragmas(
                    conn,
                    [
                        "PRAGMA foreign_keys = ON".to_owned(),
                        format!("PRAGMA busy_timeout = {SQLITE_READ_BUSY_TIMEOUT_MS}"),
                        "PRAGMA query_only = ON".to_owned(),
                        format!("PRAGMA mmap_size = {SQLITE_READ_MMAP_BYTES}"),
                    ],
                ))
            }),
        // A read waits for a lock (a table locked by maintenance) as long as
        // SQLite's reader would, then fails as unavailable: a page with a stale
        // copy is then served from it, not held until the request times out.
        Backend::Postgres => options
            .max_connections(POSTGRES_READ_CONNECTIONS)
            .after_connect(move |conn, _meta| {
                count();
                Box::pin(async move {
                    sqlx::query(&format!(
                        "SET lock_timeout = '{POSTGRES_READ_LOCK_TIMEOUT}'"
                    ))
                    .execute(&mut *conn)
                    .await
                    .map(drop)
                })
            }),
    }
}
