//! The one way this crate writes: a [`WriteTx`] on the write pool, which never lets
//! its connection serve again in an unknown state.
//!
//! Why not sqlx's own `Transaction`: sqlx counts a connection's transaction depth on
//! its side and trusts the count. When SQLite rolls a transaction back by itself
//! (it may after `SQLITE_FULL`, `SQLITE_IOERR`, `SQLITE_NOMEM` or a trigger's
//! `RAISE(ROLLBACK)`), the `ROLLBACK` sqlx sends on drop fails ("no transaction is
//! active") and the count stays at one. The next `begin()` then sends
//! `SAVEPOINT _sqlx_savepoint_1`, which opens a real transaction; a later failure
//! answers with `ROLLBACK TO SAVEPOINT`, which keeps it open, and from then on
//! every "commit" is a `RELEASE SAVEPOINT` inside a transaction that is never
//! committed: checkouts answered "placed", nothing reached the file, and a restart
//! dropped it all (reproduced by the disk-full drill in `tests/it`).
//!
//! So a [`WriteTx`] sends `BEGIN`, `COMMIT` and `ROLLBACK` itself and keeps no
//! count: it is open from [`Db::begin_write`] until [`WriteTx::commit`] or
//! [`WriteTx::rollback`] returns. If either fails, or the guard is dropped before
//! one of them ran (a statement failed and `?` returned, or the caller's future
//! was dropped), the connection is closed instead of going back to the pool:
//! closing rolls back whatever was open, on SQLite and on PostgreSQL alike. And the
//! write pool checks every connection given back to it (`connection_is_clean`),
//! so one dirtied any other way (code that writes on [`Db::write_pool`] by hand) is
//! closed too, never handed out again.
//!
//! A failed `COMMIT` is [`DbError::CommitFailed`]: whether the transaction took
//! effect may be unknown (a PostgreSQL connection lost during `COMMIT`), so callers
//! answer 503 and the request's idempotency key later gets the true outcome.

use std::ops::{Deref, DerefMut};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use sqlx::pool::PoolConnection;
use sqlx::{Any, AnyConnection, Executor, Row};

use crate::db::Backend;
use crate::{Db, DbError};

/// An open write transaction on one connection of the write pool. Use it as the
/// executor of the transaction's statements (`.execute(&mut *tx)`), then end it
/// with [`WriteTx::commit`] or [`WriteTx::rollback`].
#[must_use = "a write transaction that is dropped is rolled back (its connection closed)"]
pub struct WriteTx {
    /// `None` once the transaction has ended.
    conn: Option<PoolConnection<Any>>,
    /// The handle's count of commits, bumped by a successful `COMMIT`.
    commits: Arc<AtomicU64>,
    /// Which database, for the statements that differ.
    backend: Backend,
}

impl Db {
    /// Takes the write connection and begins a transaction on it: `BEGIN IMMEDIATE`
    /// on SQLite (the write lock is taken now, within the busy timeout, rather
    /// than at the first write), `BEGIN` on PostgreSQL.
    pub async fn begin_write(&self) -> Result<WriteTx, DbError> {
        let conn = self.write.acquire().await?;
        WriteTx::begin(conn, self.backend(), self.commits.clone()).await
    }
}

impl WriteTx {
    /// Begins a transaction on `conn`. If `BEGIN` fails (a lock held elsewhere,
    /// say) the connection goes back to the pool, whose check closes it if the
    /// failure left anything open.
    pub(crate) async fn begin(
        mut conn: PoolConnection<Any>,
        backend: Backend,
        commits: Arc<AtomicU64>,
    ) -> Result<Self, DbError> {
        let begin = match backend {
            Backend::Sqlite => "BEGIN IMMEDIATE",
            Backend::Postgres => "BEGIN",
        };
        sqlx::query(begin).execute(&mut *conn).await?;
        Ok(Self {
            conn: Some(conn),
            commits,
            backend,
        })
    }

    /// Which database the transaction is on.
    pub fn backend(&self) -> Backend {
        self.backend
    }

    /// Commits. Success means the transaction is durable as far as the database's
    /// settings make it; an error is [`DbError::CommitFailed`] and the connection
    /// is closed.
    pub async fn commit(self) -> Result<(), DbError> {
        self.commit_keeping().await.map(drop)
    }

    /// [`WriteTx::commit`], handing the (clean) connection back to the caller.
    pub(crate) async fn commit_keeping(mut self) -> Result<PoolConnection<Any>, DbError> {
        // The connection stays in the guard until COMMIT has answered: a caller
        // that gives up while it is in flight drops the guard, which closes the
        // connection rather than handing it back mid-commit.
        let committed = sqlx::query("COMMIT").execute(&mut *self).await;
        let mut conn = self.conn.take().expect("a WriteTx is open until it ends");
        match committed {
            Ok(_) => {
                self.commits.fetch_add(1, Ordering::Relaxed);
                Ok(conn)
            }
            Err(error) => {
                // Roll back what may still be open, then close the connection
                // whatever the rollback said: its state is not known for sure.
                let _ = sqlx::query("ROLLBACK").execute(&mut *conn).await;
                discard(conn).await;
                Err(DbError::CommitFailed(error))
            }
        }
    }

    /// Rolls back. If that fails the connection is closed (which rolls back too),
    /// and the error is returned.
    pub async fn rollback(mut self) -> Result<(), DbError> {
        // As in commit: held by the guard until ROLLBACK has answered.
        let rolled_back = sqlx::query("ROLLBACK").execute(&mut *self).await;
        let conn = self.conn.take().expect("a WriteTx is open until it ends");
        match rolled_back {
            Ok(_) => Ok(()),
            Err(error) => {
                discard(conn).await;
                Err(error.into())
            }
        }
    }
}

/// Closes a connection whose state is unknown, so the pool opens a fresh one.
/// Awaited, so SQLite's file lock is gone before the next writer starts.
async fn discard(conn: PoolConnection<Any>) {
    if let Err(error) = conn.close().await {
        tracing::debug!(%error, "closing a failed write connection");
    }
}

impl Deref for WriteTx {
    type Target = AnyConnection;

    fn deref(&self) -> &AnyConnection {
        self.conn
            .as_deref()
            .expect("a WriteTx is open until it ends")
    }
}

impl DerefMut for WriteTx {
    fn deref_mut(&mut self) -> &mut AnyConnection {
        self.conn
            .as_deref_mut()
            .expect("a WriteTx is open until it ends")
    }
}

impl Drop for WriteTx {
    fn drop(&mut self) {
        // Neither committed nor rolled back: a statement failed, or the caller gave
        // up half-way. Closing the connection rolls the transaction back.
        if let Some(conn) = self.conn.as_mut() {
            conn.close_on_drop();
        }
    }
}

/// The write pool's check of a connection given back to it: `true` when it is
/// outside any transaction (SQLite: a `BEGIN` is accepted, and rolled back at once;
/// PostgreSQL: this statement is the first of its transaction, so no transaction
/// block was left open). On `false` or an error the pool closes the connection
/// (which rolls back whatever was open) and opens another when one is needed.
///
/// It runs when a connection is released rather than when it is handed out: a
/// connection left inside a transaction must not sit in the idle queue holding
/// its locks (on PostgreSQL, the rows it wrote) until its turn comes. A connection
/// that passed it stays clean while idle, so it is also clean when handed out.
pub(crate) async fn connection_is_clean(
    conn: &mut AnyConnection,
    backend: Backend,
) -> Result<bool, sqlx::Error> {
    match backend {
        // One round trip to SQLite's worker thread: the ROLLBACK runs only if
        // the BEGIN was accepted.
        Backend::Sqlite => Ok(sqlx::query("BEGIN; ROLLBACK")
            .execute(&mut *conn)
            .await
            .is_ok()),
        // Sent as a simple query (a plain string, no parameters): one protocol
        // message, so the implicit transaction starts with the statement and the
        // two times are equal. (Parse, Bind and Execute would each restart the
        // statement's clock, and the check would fail on every clean connection.)
        Backend::Postgres => {
            let row = conn
                .fetch_one("SELECT now() = statement_timestamp() AS clean")
                .await?;
            row.try_get::<bool, _>("clean")
        }
    }
}
