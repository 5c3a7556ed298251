//! The database's gate, before both its pools: a database that could not be reached a moment ago is not
//! waited for again by every statement. Without it, each one waited out the
//! pool's acquire timeout (its connection attempts refused, or left unanswered)
//! and answered 503 only then: 5 s a request while the database was away, the
//! web servers' connections piling up meanwhile.
//!
//! A statement that fails without a word from the database (its connection
//! lost or refused, none opened in the acquire timeout) has the gate try a new
//! connection of its own, for at most [`CHECK_TIMEOUT`] (one at a time, and
//! none while the database answered within that time). Refused, cut, or not
//! answered in that time, the database is unreachable: the gate closes for
//! [`RETRY_EVERY`], and statements meanwhile fail at once with an error
//! [`DbError::is_unavailable`](crate::DbError::is_unavailable) says is one, not
//! busy. The first after that goes through as the probe (the others still fail
//! at once); any answer of the database (rows, or an error it sent) opens the
//! gate. Closing and opening are logged once each. A pool merely busy, or one
//! connection lost, never closes it: the gate's own connection is answered. A
//! server that stalls is found too: its connection is not answered in time.
//! PostgreSQL only: a SQLite file has no server to be away, and its one write
//! connection held past the timeout is busy, not gone.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use futures::stream::BoxStream;
use futures::{StreamExt, TryStreamExt};
use sqlx::any::{Any, AnyQueryResult, AnyRow};
use sqlx::pool::PoolConnection;
use sqlx::{AnyPool, Database, Either, Execute, Executor};

/// How long statements fail at once after the database was found unreachable,
/// before one tries it again.
pub const RETRY_EVERY: Duration = Duration::from_secs(1);

/// A pool behind its gate; statements run on `&Gated` as on `&AnyPool`.
#[derive(Debug, Clone)]
pub struct Gated {
    pool: AnyPool,
    gate: Arc<Gate>,
}

#[derive(Debug)]
struct Gate {
    /// Whether it ever closes (PostgreSQL).
    enabled: bool,
    /// [`now_ms`] until which statements fail at once; 0 when open.
    closed_until: AtomicU64,
    /// When it closed, for the log of its opening.
    closed_at: AtomicU64,
    /// When the database last answered (a statement, or the gate's check).
    answered_at: AtomicU64,
    /// A check's connection is being tried (one at a time).
    checking: AtomicBool,
}

/// How long the gate's own connection may take to be answered before the
/// database counts as unreachable.
pub const CHECK_TIMEOUT: Duration = Duration::from_secs(1);

/// Milliseconds on a clock that only goes forward (a wall clock set back must
/// not keep the gate closed), from 1.
fn now_ms() -> u64 {
    static START: OnceLock<Instant> = OnceLock::new();
    START.get_or_init(Instant::now).elapsed().as_millis() as u64 + 1
}

impl Gated {
    /// `pool` behind a gate of its own, which closes only if `enabled` (see
    /// the module's documentation).
    pub fn new(pool: AnyPool, enabled: bool) -> Self {
        Self {
            pool,
            gate: Arc::new(Gate {
                enabled,
                closed_until: AtomicU64::new(0),
                closed_at: AtomicU64::new(0),
                answered_at: AtomicU64::new(0),
                checking: AtomicBool::new(false),
            }),
        }
    }

    /// `pool` behind this one's gate: another pool of the same database (what
    /// one finds unreachable, the other cannot reach either).
    pub fn beside(&self, pool: AnyPool) -> Self {
        Self {
            pool,
            gate: self.gate.clone(),
        }
    }

    /// The pool itself (no gate).
    pub fn pool(&self) -> &AnyPool {
        &self.pool
    }

    /// A connection of the pool, through the gate.
    pub async fn acquire(&self) -> Result<PoolConnection<Any>, sqlx::Error> {
        self.admit()?;
        self.observe(self.pool.acquire().await).await
    }

    /// `run` (a statement on the pool, not started yet) through the gate.
    fn through<'e, T: Send + 'e>(
        &self,
        run: BoxFuture<'e, Result<T, sqlx::Error>>,
    ) -> BoxFuture<'e, Result<T, sqlx::Error>> {
        let this = self.clone();
        Box::pin(async move {
            this.admit()?;
            this.observe(run.await).await
        })
    }

    /// Lets a statement through, or fails it at once while the gate is
    /// closed. Once the time is up, one statement is let through as the probe.
    fn admit(&self) -> Result<(), sqlx::Error> {
        let until = self.gate.closed_until.load(Ordering::Acquire);
        if until == 0 {
            return Ok(());
        }
        let now = now_ms();
        let next = now + RETRY_EVERY.as_millis() as u64;
        if now >= until
            && self
                .gate
                .closed_until
                .compare_exchange(until, next, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
        {
            return Ok(());
        }
        Err(sqlx::Error::Io(std::io::Error::new(
            std::io::ErrorKind::NotConnected,
            Closed,
        )))
    }

    /// Opens or closes the gate by what a statement let through found; its
    /// result, with a pool that timed out on an unreachable database said to
    /// be that (not busy: nothing answered to be busy).
    async fn observe<T>(&self, result: Result<T, sqlx::Error>) -> Result<T, sqlx::Error> {
        let gate = &self.gate;
        if !gate.enabled {
            return result;
        }
        let Err(error) = &result else {
            self.heard();
            return result;
        };
        if !lost(error) {
            // The database answered (an error of its own, a row not found).
            self.heard();
            return result;
        }
        if self.reachable().await {
            // One connection lost, or the pool busy: the database answers.
            return result;
        }
        let now = now_ms();
        let next = now + RETRY_EVERY.as_millis() as u64;
        if gate.closed_until.fetch_max(next, Ordering::AcqRel) == 0 {
            gate.closed_at.store(now, Ordering::Release);
            tracing::warn!(
                %error,
                "the database cannot be reached: statements fail at once, and one \
                 a second tries it again, until it answers"
            );
        }
        match result {
            Err(sqlx::Error::PoolTimedOut) => Err(sqlx::Error::Io(std::io::Error::new(
                std::io::ErrorKind::NotConnected,
                "no connection to the database could be opened in time",
            ))),
            other => other,
        }
    }

    /// Whether the database answers: it did less than [`CHECK_TIMEOUT`] ago,
    /// or another check is under way (it decides), or a new connection of the
    /// gate's own is answered within [`CHECK_TIMEOUT`] (an error the server
    /// sends, "too many clients" say, is an answer). One connection at a time
    /// and at most one a second: a pool timing out under load is not answered
    /// with more connections.
    async fn reachable(&self) -> bool {
        use sqlx::{ConnectOptions, Connection};
        let gate = &self.gate;
        let recent = CHECK_TIMEOUT.as_millis() as u64;
        if now_ms().saturating_sub(gate.answered_at.load(Ordering::Acquire)) < recent
            || gate.checking.swap(true, Ordering::AcqRel)
        {
            return true;
        }
        // Cleared however the check ends (its caller may give up on it).
        struct Checked<'a>(&'a AtomicBool);
        impl Drop for Checked<'_> {
            fn drop(&mut self) {
                self.0.store(false, Ordering::Release);
            }
        }
        let _checked = Checked(&gate.checking);
        let options = self.pool.connect_options();
        let answered = match tokio::time::timeout(CHECK_TIMEOUT, options.connect()).await {
            Ok(Ok(conn)) => {
                let _ = conn.close().await;
                true
            }
            Ok(Err(sqlx::Error::Database(_))) => true,
            _ => false,
        };
        if answered {
            gate.answered_at.fetch_max(now_ms(), Ordering::AcqRel);
        }
        answered
    }

    /// The database answered: the gate opens (said once).
    fn heard(&self) {
        let gate = &self.gate;
        gate.answered_at.fetch_max(now_ms(), Ordering::AcqRel);
        if gate.closed_until.load(Ordering::Acquire) != 0
            && gate.closed_until.swap(0, Ordering::AcqRel) != 0
        {
            let since = gate.closed_at.load(Ordering::Acquire);
            tracing::warn!(
                away_ms = now_ms().saturating_sub(since),
                "the database answers again"
            );
        }
    }
}

/// Whether `error` says no word came from the database: its connection lost or
/// refused, none opened in time (not a statement's own failure).
fn lost(error: &sqlx::Error) -> bool {
    match error {
        sqlx::Error::Io(_) | sqlx::Error::Tls(_) | sqlx::Error::PoolTimedOut => true,
        sqlx::Error::Database(e) => e
            .try_downcast_ref::<sqlx::postgres::PgDatabaseError>()
            .is_some_and(|e| {
                // Connection exceptions; an administrator's or a crash's shutdown.
                e.code().starts_with("08") || matches!(e.code(), "57P01" | "57P02" | "57P03")
            }),
        _ => false,
    }
}

/// The error of a statement the closed gate failed at once (inside an
/// [`sqlx::Error::Io`]; see [`DbError::failed_fast`](crate::DbError::failed_fast)).
#[derive(Debug, thiserror::Error)]
#[error("the database could not be reached a moment ago (it is tried again once a second)")]
pub struct Closed;

/// Whether `error` is the closed gate's.
pub(crate) fn is_closed_error(error: &sqlx::Error) -> bool {
    match error {
        sqlx::Error::Io(e) => e.get_ref().is_some_and(|inner| inner.is::<Closed>()),
        _ => false,
    }
}

impl<'p> Executor<'p> for &'_ Gated {
    type Database = Any;

    fn fetch_many<'e, 'q: 'e, E>(
        self,
        query: E,
    ) -> BoxStream<'e, Result<Either<AnyQueryResult, AnyRow>, sqlx::Error>>
    where
        'p: 'e,
        E: 'q + Execute<'q, Any>,
    {
        let pool = self.pool.clone();
        // Whole, then streamed: the shop's statements read what they need at once.
        let all = self.through(Box::pin(async move {
            pool.fetch_many(query).try_collect::<Vec<_>>().await
        }));
        futures::stream::once(all)
            .map_ok(|all| futures::stream::iter(all.into_iter().map(Ok)))
            .try_flatten()
            .boxed()
    }

    // The two the shop uses most besides `fetch_optional`, straight to the
    // pool's own: not through `fetch_many`, which gathers the rows once more.
    fn execute<'e, 'q: 'e, E>(self, query: E) -> BoxFuture<'e, Result<AnyQueryResult, sqlx::Error>>
    where
        'p: 'e,
        E: 'q + Execute<'q, Any>,
    {
        let pool = self.pool.clone();
        self.through(Box::pin(async move { pool.execute(query).await }))
    }

    fn fetch_all<'e, 'q: 'e, E>(self, query: E) -> BoxFuture<'e, Result<Vec<AnyRow>, sqlx::Error>>
    where
        'p: 'e,
        E: 'q + Execute<'q, Any>,
    {
        let pool = self.pool.clone();
        self.through(Box::pin(async move { pool.fetch_all(query).await }))
    }

    fn fetch_optional<'e, 'q: 'e, E>(
        self,
        query: E,
    ) -> BoxFuture<'e, Result<Option<AnyRow>, sqlx::Error>>
    where
        'p: 'e,
        E: 'q + Execute<'q, Any>,
    {
        let pool = self.pool.clone();
        self.through(Box::pin(async move { pool.fetch_optional(query).await }))
    }

    fn prepare_with<'e, 'q: 'e>(
        self,
        sql: &'q str,
        parameters: &'e [<Any as Database>::TypeInfo],
    ) -> BoxFuture<'e, Result<<Any as Database>::Statement<'q>, sqlx::Error>>
    where
        'p: 'e,
    {
        let pool = self.pool.clone();
        Box::pin(async move { pool.prepare_with(sql, parameters).await })
    }

    fn describe<'e, 'q: 'e>(
        self,
        sql: &'q str,
    ) -> BoxFuture<'e, Result<sqlx::Describe<Any>, sqlx::Error>>
    where
        'p: 'e,
    {
        let pool = self.pool.clone();
        Box::pin(async move { pool.describe(sql).await })
    }
}
