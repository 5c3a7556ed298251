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
//!
//! In batches: the daemon's step ([`Refresher::step_batch`]) claims up to
//! [`DEFAULT_BATCH`] due rows in one script call, reads them in one query
//! ([`RowSource::load_many`]: a chunked `IN` for the database), and stores and
//! reschedules them in one more script call, so a refresh costs three round trips
//! per batch instead of three per row. [`Refresher::step`] is the same with a batch
//! of one. The daemon keeps [`DEFAULT_IN_FLIGHT`] batches in flight
//! ([`Refresher::step_overlapped`]): while one waits for the database, the other
//! claims or stores, so one refresher keeps up where one batch at a time could not
//! (BENCHMARKS.md, "Row refresh in batches").

use std::collections::HashMap;
use std::error::Error;
use std::future::Future;
use std::sync::Arc;
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
/// The most rows the daemon claims, reads and stores at once: one database query
/// and two script calls for them all; a script over this many rows holds Redis
/// well under a millisecond.
pub const DEFAULT_BATCH: usize = 100;
/// The default number of batches one refresher has in flight at once (see the
/// module docs): measured best of 1, 2, 3, 4 and 8 with `bench row_lag`.
pub const DEFAULT_IN_FLIGHT: usize = 3;

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

    /// Reads several rows: those that exist, by id. One at a time unless the
    /// source knows better (the database reads them in one query).
    fn load_many(
        &self,
        rows: &[ItemId],
    ) -> impl Future<Output = Result<HashMap<ItemId, String>, SourceError>> + Send {
        async move {
            let mut found = HashMap::with_capacity(rows.len());
            for &row in rows {
                if let Some(json) = self.load(row).await? {
                    found.insert(row, json);
                }
            }
            Ok(found)
        }
    }
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

/// What one batch step did.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RefreshBatch {
    /// Rows stored fresh and rescheduled.
    pub refreshed: u64,
    /// Rows that left the cache.
    pub removed: u64,
    /// Rows whose read failed (kept, retried after a back-off).
    pub failed: u64,
    /// When nothing was due: when the next row is (`Some(None)`: nothing
    /// scheduled at all).
    pub idle: Option<Option<Duration>>,
}

/// The refresher daemon over a row source.
pub struct Refresher<S> {
    conn: RedisConn,
    keys: Keys,
    source: Arc<S>,
    batch: usize,
    in_flight: usize,
    /// The batches under way in the daemon's step, each a task of its own.
    running: tokio::task::JoinSet<Result<RefreshBatch, CacheError>>,
}

impl<S: RowSource> Refresher<S> {
    /// A refresher for the row cache under `keys`, reading rows from `source`,
    /// [`DEFAULT_BATCH`] rows a step in the daemon loop.
    pub fn new(conn: RedisConn, keys: Keys, source: S) -> Self {
        Self {
            conn,
            keys,
            source: Arc::new(source),
            batch: DEFAULT_BATCH,
            in_flight: DEFAULT_IN_FLIGHT,
            running: tokio::task::JoinSet::new(),
        }
    }

    /// The same refresher with `n` (at least 1) batches in flight in the daemon's
    /// step.
    pub fn with_in_flight(mut self, n: usize) -> Self {
        self.in_flight = n.max(1);
        self
    }

    /// The same refresher taking up to `batch` rows a step (at least one).
    pub fn with_batch(mut self, batch: usize) -> Self {
        self.batch = batch.max(1);
        self
    }

    /// Refreshes (or removes) the earliest due rows, up to the batch: the
    /// daemon's step.
    pub async fn step_batch(&self) -> Result<RefreshBatch, CacheError> {
        let mut done = RefreshBatch::default();
        match self.refresh(self.batch).await? {
            Err(next) => done.idle = Some(next),
            Ok(rows) => {
                for (_, step) in rows {
                    match step {
                        RefreshStep::Refreshed(_) => done.refreshed += 1,
                        RefreshStep::Removed(_) => done.removed += 1,
                        RefreshStep::Failed(_) => done.failed += 1,
                        RefreshStep::Idle(_) => {}
                    }
                }
            }
        }
        Ok(done)
    }

    /// Refreshes (or removes) the earliest due row, if any: a batch of one.
    pub async fn step(&self) -> Result<RefreshStep, CacheError> {
        Ok(match self.refresh(1).await? {
            Err(next) => RefreshStep::Idle(next),
            Ok(rows) => rows
                .into_iter()
                .next()
                .map_or(RefreshStep::Idle(Some(Duration::ZERO)), |(_, step)| step),
        })
    }

    /// Claims up to `most` due rows, reads them, stores or removes them. `Err`
    /// with when the next row is due when none was; else each claimed row's
    /// outcome (`Idle(Some(0))` for one scheduled again since its claim).
    #[allow(clippy::type_complexity)]
    async fn refresh(
        &self,
        most: usize,
    ) -> Result<Result<Vec<(ItemId, RefreshStep)>, Option<Duration>>, CacheError> {
        let mut conn = self.conn.clone();
        let claimed: Vec<String> = scripts::CLAIM_ROW
            .key(self.keys.schedule())
            .key(self.keys.delay())
            .arg(LEASE.as_secs())
            .arg(most)
            .invoke_async(&mut conn)
            .await?;
        let corrupt = || CacheError::Corrupt { what: "schedule:" };
        let (what, rest) = claimed.split_first().ok_or_else(corrupt)?;
        if what == "idle" {
            let next: f64 = rest
                .first()
                .and_then(|n| n.parse().ok())
                .ok_or_else(corrupt)?;
            return Ok(Err((next >= 0.0).then(|| Duration::from_secs_f64(next))));
        }
        // The claimed rows with their delays; members that are no row id this
        // shop writes are dropped so they cannot block the queue.
        let mut rows: Vec<(ItemId, f64)> = Vec::with_capacity(rest.len() / 2);
        let mut malformed = Vec::new();
        for pair in rest.chunks(2) {
            let [row, delay] = pair else {
                return Err(corrupt());
            };
            match (row.parse::<ItemId>(), delay.parse::<f64>()) {
                (Ok(row), Ok(delay)) => rows.push((row, delay)),
                _ => malformed.push(row.clone()),
            }
        }
        if !malformed.is_empty() {
            tracing::warn!(
                count = malformed.len(),
                "removing malformed members of schedule:"
            );
            redis::cmd("ZREM")
                .arg(self.keys.schedule())
                .arg(&malformed)
                .exec_async(&mut conn)
                .await?;
            if rows.is_empty() {
                return Err(corrupt());
            }
        }
        // Rows with a delay are read, all in one go; the others are removed
        // without reading the database.
        let wanted: Vec<ItemId> = rows
            .iter()
            .filter(|(_, delay)| *delay > 0.0)
            .map(|(row, _)| *row)
            .collect();
        let loaded = if wanted.is_empty() {
            Ok(HashMap::new())
        } else {
            self.source.load_many(&wanted).await
        };
        if let Err(error) = &loaded {
            tracing::warn!(rows = wanted.len(), %error, "row source failed; keeping the cached copies");
        }
        let mut finish = scripts::FINISH_ROW.prepare_invoke();
        finish.key(self.keys.schedule()).key(self.keys.delay());
        let mut outcomes = Vec::with_capacity(rows.len());
        for (row, delay) in &rows {
            let (mode, value, outcome) = match (&loaded, *delay > 0.0) {
                (_, false) => ("unscheduled", String::new(), RefreshStep::Removed(*row)),
                (Ok(found), true) => match found.get(row) {
                    Some(json) => ("store", json.clone(), RefreshStep::Refreshed(*row)),
                    None => ("missing", String::new(), RefreshStep::Removed(*row)),
                },
                (Err(_), true) => (
                    "retry",
                    RETRY_BACKOFF.as_secs().to_string(),
                    RefreshStep::Failed(*row),
                ),
            };
            finish
                .key(self.keys.inventory(*row))
                .arg(*row)
                .arg(mode)
                .arg(value);
            outcomes.push((*row, outcome));
        }
        let kept: Vec<i64> = finish.invoke_async(&mut conn).await?;
        Ok(Ok(outcomes
            .into_iter()
            .zip(kept)
            .map(|((row, outcome), kept)| {
                let step = match kept {
                    0 => RefreshStep::Removed(row),
                    // Scheduled again after the claim found it unscheduled.
                    3 => RefreshStep::Idle(Some(Duration::ZERO)),
                    _ => outcome,
                };
                (row, step)
            })
            .collect()))
    }
}

impl<S: RowSource + 'static> Refresher<S> {
    /// The daemon's step: keeps `in_flight` batches ([`Refresher::step_batch`]) under
    /// way, each a task of its own (each claims its own rows: the claim is atomic),
    /// and returns the first to end; a new one starts in its place at the next
    /// call, so one batch's database read overlaps the others' Redis calls. The
    /// others go on meanwhile: their results come with the next calls.
    pub async fn step_overlapped(&mut self) -> Result<RefreshBatch, CacheError> {
        while self.running.len() < self.in_flight {
            let batch = Refresher {
                conn: self.conn.clone(),
                keys: self.keys.clone(),
                source: self.source.clone(),
                batch: self.batch,
                in_flight: 1,
                running: tokio::task::JoinSet::new(),
            };
            self.running.spawn(async move { batch.step_batch().await });
        }
        let first = self.running.join_next().await;
        let mut done = joined(first.expect("at least one batch is under way"))?;
        // An idle answer may be old (a batch that found nothing due while the
        // daemon paused): the others that ended meanwhile count too, so the
        // daemon does not pause for rows that have come due since.
        while done.idle.is_some() {
            let Some(other) = self.running.try_join_next() else {
                break;
            };
            let other = joined(other)?;
            if other.idle.is_none() {
                done = other;
            }
        }
        Ok(done)
    }

    /// Waits for the batches under way (a graceful stop lets them store what
    /// they read), at most [`FINISH_WAIT`]; the rest are dropped (their rows come
    /// due again after the lease).
    pub async fn finish_batches(&mut self) {
        let wait = async {
            while let Some(ended) = self.running.join_next().await {
                if let Err(error) = joined(ended) {
                    tracing::warn!(%error, "row refresh batch failed at the stop");
                }
            }
        };
        if tokio::time::timeout(FINISH_WAIT, wait).await.is_err() {
            tracing::warn!("row refresh batches still under way at the stop: dropped");
            self.running.abort_all();
        }
    }
}

/// How long a graceful stop waits for the refresh batches under way.
pub const FINISH_WAIT: Duration = Duration::from_secs(5);

/// A batch task's answer, a panicked task as an error.
fn joined(
    ended: Result<Result<RefreshBatch, CacheError>, tokio::task::JoinError>,
) -> Result<RefreshBatch, CacheError> {
    ended.map_err(|failed| CacheError::Source {
        what: "row refresh task",
        source: Box::new(failed),
    })?
}

impl<S: RowSource + 'static> Daemon for Refresher<S> {
    const NAME: &'static str = "row-refresher";
    type Error = CacheError;

    async fn tick(&mut self) -> Result<Duration, CacheError> {
        Ok(match self.step_overlapped().await?.idle {
            Some(next) => next.map_or(IDLE_POLL, |n| n.min(IDLE_POLL)),
            None => Duration::ZERO,
        })
    }

    async fn finish(&mut self) {
        self.finish_batches().await;
    }
}
