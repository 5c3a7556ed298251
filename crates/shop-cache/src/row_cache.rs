//! The database row cache: copies of database rows in Redis (`inv:<row>`, a JSON
//! object), each refreshed on its own interval by the refresher daemon, so pages that
//! show fast-changing rows (flash-sale stock) never query the database.
//!
//! Book semantics, made safe for any number of refreshers: `delay:` holds each row's
//! interval, `schedule:` when it is next due. [`RowCache::schedule`] makes a row due
//! now. The refresher's [`Refresher::step`] atomically claims the earliest due row
//! (pushing it a lease ahead, so no other refresher takes it, and it never leaves
//! `schedule:`), reads it from its [`RowSource`], then stores it and reschedules it at
//! now + delay, in a second atomic call that uses the delay as it is by then. A
//! delay that is missing or `<= 0` removes the row and its `inv:` copy (the book
//! crashed on a missing delay). A database error keeps the old copy and retries the
//! row after a back-off.

use std::error::Error;
use std::future::Future;
use std::time::Duration;

use crate::RedisConn;

use crate::daemon::Daemon;
use crate::domain::ItemId;
use crate::keys::Keys;
use crate::{CacheError, scripts};

/// How long a claimed row is hidden from other refreshers: longer than any database
/// read should take. If a refresher dies mid-refresh, the row is due again after it.
pub const LEASE: Duration = Duration::from_secs(30);
/// How long after a failed database read the row is tried again.
pub const RETRY_BACKOFF: Duration = Duration::from_secs(2);
/// The longest the refresher sleeps when nothing is due, as in the book.
pub const IDLE_POLL: Duration = Duration::from_millis(50);

/// A failure of the row source (the database), kept opaque here.
pub type SourceError = Box<dyn Error + Send + Sync>;

/// Where rows come from: the row as a JSON object, or `None` if it does not exist.
///
/// Any `Fn(ItemId) -> impl Future<Output = Result<Option<String>, SourceError>>` is
/// one, so the binary passes a closure over its database handle and this crate does
/// not depend on the SQL layer.
pub trait RowSource: Send + Sync {
    /// Reads one row.
    fn load(&self, row: ItemId)
    -> impl Future<Output = Result<Option<String>, SourceError>> + Send;
}

impl<F, Fut> RowSource for F
where
    F: Fn(ItemId) -> Fut + Send + Sync,
    Fut: Future<Output = Result<Option<String>, SourceError>> + Send,
{
    fn load(
        &self,
        row: ItemId,
    ) -> impl Future<Output = Result<Option<String>, SourceError>> + Send {
        self(row)
    }
}

/// A scheduled row, as `shop rows list` shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct ScheduledRow {
    /// The row.
    pub row: ItemId,
    /// Its refresh interval in seconds (`None` if missing: it will be removed).
    pub delay: Option<f64>,
    /// Unix time it is next due.
    pub next_at: f64,
}

/// Scheduling and reading cached rows.
#[derive(Clone)]
pub struct RowCache {
    conn: RedisConn,
    keys: Keys,
}

impl RowCache {
    /// The row cache under `keys`.
    pub fn new(conn: RedisConn, keys: Keys) -> Self {
        Self { conn, keys }
    }

    /// Caches `row`, refreshed every `delay_seconds`, starting now; `<= 0` stops
    /// caching it (the refresher removes it and its copy when it next comes due).
    pub async fn schedule(&self, row: ItemId, delay_seconds: f64) -> Result<(), CacheError> {
        scripts::SCHEDULE_ROW
            .key(self.keys.schedule())
            .key(self.keys.delay())
            .arg(row)
            .arg(delay_seconds)
            .invoke_async::<()>(&mut self.conn.clone())
            .await?;
        Ok(())
    }

    /// Stops caching `row` (the book's way: delay -1, due now).
    pub async fn unschedule(&self, row: ItemId) -> Result<(), CacheError> {
        self.schedule(row, -1.0).await
    }

    /// Writes `json` as `row`'s cached copy now, if the row is cached (its source
    /// changed), and makes it due so the refresher reads it again at once: a
    /// refresh that read the source before the change cannot leave its old copy for
    /// a whole interval. `false` if the row is not cached (nothing written).
    pub async fn replace(&self, row: ItemId, json: &str) -> Result<bool, CacheError> {
        let done: i64 = scripts::REPLACE_ROW
            .key(self.keys.schedule())
            .key(self.keys.delay())
            .key(self.keys.inventory(row))
            .arg(row)
            .arg(json)
            .invoke_async(&mut self.conn.clone())
            .await?;
        Ok(done == 1)
    }

    /// The cached copy of `row` (a JSON object), if any.
    pub async fn get(&self, row: ItemId) -> Result<Option<String>, CacheError> {
        Ok(redis::cmd("GET")
            .arg(self.keys.inventory(row))
            .query_async(&mut self.conn.clone())
            .await?)
    }

    /// How overdue the most overdue row is, in seconds (0 when none is overdue,
    /// `None` when nothing is scheduled), on the server's clock: a refresher that is
    /// down or too slow shows as a growing lag.
    pub async fn lag(&self) -> Result<Option<f64>, CacheError> {
        let ((secs, micros), first): ((u64, u64), Vec<(String, f64)>) = redis::pipe()
            .cmd("TIME")
            .cmd("ZRANGE")
            .arg(self.keys.schedule())
            .arg(0)
            .arg(0)
            .arg("WITHSCORES")
            .query_async(&mut self.conn.clone())
            .await?;
        let now = secs as f64 + micros as f64 / 1e6;
        Ok(first.first().map(|(_, due)| (now - due).max(0.0)))
    }

    /// Every scheduled row, soonest due first.
    pub async fn list(&self) -> Result<Vec<ScheduledRow>, CacheError> {
        let mut conn = self.conn.clone();
        let due: Vec<(String, f64)> = redis::cmd("ZRANGE")
            .arg(self.keys.schedule())
            .arg(0)
            .arg(-1)
            .arg("WITHSCORES")
            .query_async(&mut conn)
            .await?;
        if due.is_empty() {
            return Ok(Vec::new());
        }
        let delays: Vec<Option<f64>> = redis::cmd("ZMSCORE")
            .arg(self.keys.delay())
            .arg(due.iter().map(|(row, _)| row.as_str()).collect::<Vec<_>>())
            .query_async(&mut conn)
            .await?;
        due.into_iter()
            .zip(delays)
            .map(|((row, next_at), delay)| {
                Ok(ScheduledRow {
                    row: row
                        .parse()
                        .map_err(|_| CacheError::Corrupt { what: "schedule:" })?,
                    delay,
                    next_at,
                })
            })
            .collect()
    }
}

/// What one refresher step did.
#[derive(Debug, Clone, PartialEq)]
pub enum RefreshStep {
    /// Stored a fresh copy and rescheduled the row.
    Refreshed(ItemId),
    /// The row left the cache (delay `<= 0` or missing, or no such row any more).
    Removed(ItemId),
    /// The source failed; the old copy stays, the row is retried after a back-off.
    Failed(ItemId),
    /// Nothing due; the next row is due in this long (`None`: nothing scheduled).
    Idle(Option<Duration>),
}

/// The refresher daemon over a row source.
pub struct Refresher<S> {
    conn: RedisConn,
    keys: Keys,
    source: S,
}

impl<S: RowSource> Refresher<S> {
    /// A refresher for the row cache under `keys`, reading rows from `source`.
    pub fn new(conn: RedisConn, keys: Keys, source: S) -> Self {
        Self { conn, keys, source }
    }

    /// Refreshes (or removes) the earliest due row, if any.
    pub async fn step(&self) -> Result<RefreshStep, CacheError> {
        let mut conn = self.conn.clone();
        let (what, row, number): (String, String, String) = scripts::CLAIM_ROW
            .key(self.keys.schedule())
            .key(self.keys.delay())
            .arg(LEASE.as_secs())
            .invoke_async(&mut conn)
            .await?;
        let corrupt = || CacheError::Corrupt { what: "schedule:" };
        if what == "idle" {
            let next: f64 = number.parse().map_err(|_| corrupt())?;
            return Ok(RefreshStep::Idle(
                (next >= 0.0).then(|| Duration::from_secs_f64(next)),
            ));
        }
        let Ok(row) = row.parse::<ItemId>() else {
            // Not a row id this shop writes: drop it so it cannot block the queue.
            tracing::warn!("removing a malformed member of schedule:");
            redis::cmd("ZREM")
                .arg(self.keys.schedule())
                .arg(&row)
                .exec_async(&mut conn)
                .await?;
            return Err(corrupt());
        };
        let delay: f64 = number.parse().map_err(|_| corrupt())?;
        let loaded = if delay <= 0.0 {
            // Not to be cached any more: removed without reading the database.
            None
        } else {
            Some(self.source.load(row).await)
        };
        let (mode, value, outcome) = match loaded {
            None => ("unscheduled", String::new(), RefreshStep::Removed(row)),
            Some(Ok(Some(json))) => ("store", json, RefreshStep::Refreshed(row)),
            Some(Ok(None)) => ("missing", String::new(), RefreshStep::Removed(row)),
            Some(Err(error)) => {
                tracing::warn!(row = %row, %error, "row source failed; keeping the cached copy");
                (
                    "retry",
                    RETRY_BACKOFF.as_secs().to_string(),
                    RefreshStep::Failed(row),
                )
            }
        };
        let kept: i64 = scripts::FINISH_ROW
            .key(self.keys.schedule())
            .key(self.keys.delay())
            .key(self.keys.inventory(row))
            .arg(row)
            .arg(mode)
            .arg(value)
            .invoke_async(&mut conn)
            .await?;
        Ok(match kept {
            0 => RefreshStep::Removed(row),
            // Scheduled again after the claim found it unscheduled: nothing done.
            3 => RefreshStep::Idle(Some(Duration::ZERO)),
            _ => outcome,
        })
    }
}

impl<S: RowSource> Daemon for Refresher<S> {
    const NAME: &'static str = "row-refresher";
    type Error = CacheError;

    async fn tick(&mut self) -> Result<Duration, CacheError> {
        Ok(match self.step().await? {
            RefreshStep::Idle(next) => next.map_or(IDLE_POLL, |n| n.min(IDLE_POLL)),
            _ => Duration::ZERO,
        })
    }
}
