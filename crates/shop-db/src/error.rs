//! The error type of the SQL layer.

/// Everything that can go wrong talking to the database.
#[derive(Debug, thiserror::Error)]
pub enum DbError {
    /// The URL names no supported database.
    #[error("unsupported database URL {0:?}: use sqlite:PATH or postgres://...")]
    UnsupportedUrl(String),
    /// The database could not be reached, or a query failed.
    #[error("database: {0}")]
    Sqlx(#[from] sqlx::Error),
    /// `COMMIT` failed: the transaction did not take effect, or (a connection lost
    /// during the commit) whether it did is unknown. Callers answer "try again"
    /// (503), never "done": a retry with the same idempotency key finds out.
    #[error("database commit failed: {0}")]
    CommitFailed(#[source] sqlx::Error),
    /// A migration failed at start-up.
    #[error("database migration: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
    /// Hashing or checking a password failed (not a wrong password: that is `None`).
    #[error("password hashing: {0}")]
    Password(String),
    /// The SQLite file opened is no longer at its path (moved, removed or
    /// replaced under the running server).
    #[error("the database file {0:?} is no longer the one this server opened")]
    FileMoved(std::path::PathBuf),
    /// The database held a value this code cannot have written.
    #[error("unexpected value in {what}")]
    Corrupt {
        /// Which table or column.
        what: &'static str,
    },
}

impl DbError {
    /// True when a write only waited too long (for the write connection, or for a
    /// lock another transaction holds) rather than being refused: the database
    /// takes writes, just not this one now. Health checks count these as busy, not
    /// as failing.
    pub fn is_busy(&self) -> bool {
        match self {
            DbError::Sqlx(sqlx::Error::PoolTimedOut) => true,
            DbError::Sqlx(sqlx::Error::Database(e)) => lock_wait(e.as_ref()),
            _ => false,
        }
    }

    /// True when the statement never reached the database: it was found
    /// unreachable a moment ago (see [`crate::gate`], which logged that once).
    pub fn failed_fast(&self) -> bool {
        matches!(self, DbError::Sqlx(e) if crate::gate::is_closed_error(e))
    }

    /// True when the database is unreachable, overloaded or locked rather than the
    /// request being wrong: callers answer 503 or retry later.
    ///
    /// Besides lost connections and pool timeouts (every connection busy, or the
    /// write connection queued behind a lock for longer than its acquire timeout),
    /// that is a lock wait that ran out: SQLite's `SQLITE_BUSY`/`SQLITE_LOCKED`
    /// ("database is locked", its busy timeout expired) and PostgreSQL's
    /// `lock_not_available` (55P03, its `lock_timeout` expired); a store that cannot
    /// take the write now: SQLite's `SQLITE_FULL` (disk full), `SQLITE_IOERR`,
    /// `SQLITE_READONLY`, `SQLITE_CANTOPEN`, `SQLITE_NOMEM`, `SQLITE_PROTOCOL`;
    /// PostgreSQL's connection, resource (disk full is 53100), shutdown and system
    /// classes (08, 53, 57P01-57P05, 58), a statement timeout (57014), a server
    /// that takes no writes (25006: a standby, a demoted primary) and the retryable
    /// transaction failures (40001, 40P01); and any failed commit.
    pub fn is_unavailable(&self) -> bool {
        match self {
            DbError::CommitFailed(_) | DbError::FileMoved(_) => true,
            DbError::Sqlx(
                sqlx::Error::Io(_)
                | sqlx::Error::PoolTimedOut
                | sqlx::Error::PoolClosed
                | sqlx::Error::WorkerCrashed
                | sqlx::Error::Tls(_),
            ) => true,
            DbError::Sqlx(sqlx::Error::Database(e)) => database_unavailable(e.as_ref()),
            _ => false,
        }
    }
}

/// SQLite's primary result codes for "the write cannot be done now": the lock could
/// not be had in time, or the file system or memory refused.
const SQLITE_BUSY: i64 = 5;
const SQLITE_LOCKED: i64 = 6;
const SQLITE_NOMEM: i64 = 7;
const SQLITE_READONLY: i64 = 8;
const SQLITE_IOERR: i64 = 10;
const SQLITE_FULL: i64 = 13;
const SQLITE_CANTOPEN: i64 = 14;
const SQLITE_PROTOCOL: i64 = 15;

fn database_unavailable(e: &dyn sqlx::error::DatabaseError) -> bool {
    if lock_wait(e) {
        return true;
    }
    if e.try_downcast_ref::<sqlx::sqlite::SqliteError>().is_some() {
        return matches!(
            sqlite_primary(e),
            Some(
                SQLITE_NOMEM
                    | SQLITE_READONLY
                    | SQLITE_IOERR
                    | SQLITE_FULL
                    | SQLITE_CANTOPEN
                    | SQLITE_PROTOCOL
            )
        );
    }
    if let Some(e) = e.try_downcast_ref::<sqlx::postgres::PgDatabaseError>() {
        let state = e.code();
        return matches!(state, "57014" | "40001" | "40P01" | "25006")
            || state.starts_with("08")
            || state.starts_with("53")
            || state.starts_with("58")
            || state.starts_with("57P");
    }
    false
}

/// A lock wait that ran out: SQLite's BUSY or LOCKED ("database is locked", its
/// busy timeout expired), PostgreSQL's 55P03 (its `lock_timeout` expired).
fn lock_wait(e: &dyn sqlx::error::DatabaseError) -> bool {
    if e.try_downcast_ref::<sqlx::sqlite::SqliteError>().is_some() {
        return matches!(sqlite_primary(e), Some(SQLITE_BUSY | SQLITE_LOCKED))
            || e.message().contains("database is locked");
    }
    e.code().as_deref() == Some("55P03")
}

/// The primary result code of a SQLite error: the code sqlx reports is the
/// extended one, whose low byte is the primary (SQLITE_BUSY_SNAPSHOT = 517 is a
/// BUSY, for instance).
fn sqlite_primary(e: &dyn sqlx::error::DatabaseError) -> Option<i64> {
    e.code()?.parse::<i64>().ok().map(|c| c & 0xff)
}
