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
    /// A migration failed at start-up.
    #[error("database migration: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
    /// Hashing or checking a password failed (not a wrong password: that is `None`).
    #[error("password hashing: {0}")]
    Password(String),
    /// The database held a value this code cannot have written.
    #[error("unexpected value in {what}")]
    Corrupt {
        /// Which table or column.
        what: &'static str,
    },
}

impl DbError {
    /// True when the database is unreachable or overloaded rather than the request
    /// being wrong: callers answer 503 or retry later.
    pub fn is_unavailable(&self) -> bool {
        matches!(
            self,
            DbError::Sqlx(
                sqlx::Error::Io(_)
                    | sqlx::Error::PoolTimedOut
                    | sqlx::Error::PoolClosed
                    | sqlx::Error::WorkerCrashed
                    | sqlx::Error::Tls(_)
            )
        )
    }
}
