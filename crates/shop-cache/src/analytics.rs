//! Page-view analytics: the global ranking of items by views (`viewed:`, scores are
//! minus the view count so the most viewed item has rank 0), which decides what the
//! page cache keeps, and its rescale daemon.
//!
//! Views are counted in each web process as sessions are touched and written to
//! `viewed:` by that process's [`crate::session::ViewFlusher`] every tenth of a
//! second; this module only reads and rescales.

use std::time::Duration;

use crate::RedisConn;

use crate::daemon::Daemon;
use crate::domain::ItemId;
use crate::insights::Insights;
use crate::keys::Keys;
use crate::{CacheError, scripts};

/// How many items the rescale keeps: twice the page cache's top 10,000, so items just
/// below the line keep their counts and can climb back.
pub const DEFAULT_KEEP: u64 = 20_000;
/// How often the counts are trimmed and halved, as in the book.
pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(300);

/// Reads of the view ranking.
#[derive(Clone)]
pub struct Analytics {
    conn: RedisConn,
    keys: Keys,
}

impl Analytics {
    /// The ranking stored under `keys`.
    pub fn new(conn: RedisConn, keys: Keys) -> Self {
        Self { conn, keys }
    }

    /// The item's rank (0 = most viewed), or `None` if it has no recorded views.
    pub async fn rank(&self, item: ItemId) -> Result<Option<u64>, CacheError> {
        Ok(redis::cmd("ZRANK")
            .arg(self.keys.item_views())
            .arg(item)
            .query_async(&mut self.conn.clone())
            .await?)
    }

    /// Takes `item` out of the ranking (it is no longer sold): it leaves the home
    /// page and the page cache's top at once.
    pub async fn forget(&self, item: ItemId) -> Result<(), CacheError> {
        redis::cmd("ZREM")
            .arg(self.keys.item_views())
            .arg(item)
            .exec_async(&mut self.conn.clone())
            .await?;
        Ok(())
    }

    /// The `n` most viewed items with their (decayed) view counts, most viewed first.
    pub async fn top(&self, n: u64) -> Result<Vec<(ItemId, f64)>, CacheError> {
        if n == 0 {
            return Ok(Vec::new());
        }
        let raw: Vec<(String, f64)> = redis::cmd("ZRANGE")
            .arg(self.keys.item_views())
            .arg(0)
            .arg(n - 1)
            .arg("WITHSCORES")
            .query_async(&mut self.conn.clone())
            .await?;
        raw.into_iter()
            .map(|(item, score)| {
                let item = item
                    .parse()
                    .map_err(|_| CacheError::Corrupt { what: "viewed:" })?;
                Ok((item, -score))
            })
            .collect()
    }
}

/// What one rescale step did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RescaleStep {
    /// Trimmed and halved; this many items remain.
    Rescaled(u64),
    /// Another worker (or this one) rescaled less than an interval ago.
    AlreadyDone,
}

/// The rescale daemon: every `interval`, keep the `keep` most viewed items and halve
/// every count, so new favourites can rise; the also-bought counts of the shopper
/// insights are halved with them. Safe to run in any number of processes.
#[derive(Clone)]
pub struct Rescaler {
    conn: RedisConn,
    keys: Keys,
    interval: Duration,
    keep: u64,
}

impl Rescaler {
    /// A rescaler for the ranking under `keys`. `interval` is rounded to whole
    /// seconds (at least one).
    pub fn new(conn: RedisConn, keys: Keys, interval: Duration, keep: u64) -> Self {
        Self {
            conn,
            keys,
            interval: interval.max(Duration::from_secs(1)),
            keep,
        }
    }

    /// Rescales unless the last rescale (by any worker) is less than an interval old
    /// on the server's clock, then finishes any also-bought decay still due.
    pub async fn step(&self) -> Result<RescaleStep, CacheError> {
        let kept: i64 = scripts::RESCALE_VIEWS
            .key(self.keys.item_views())
            .key(self.keys.views_rescaled())
            .key(self.keys.also_bought_epoch())
            .arg(self.interval.as_secs())
            .arg(self.keep)
            .invoke_async(&mut self.conn.clone())
            .await?;
        // The also-bought counts follow the views: each rescale is a decay due, done
        // by whichever worker gets here first, and retried by the next step if it
        // fails (the decay keeps its own record of what is done).
        Insights::new(self.conn.clone(), self.keys.clone())
            .decay()
            .await?;
        Ok(match u64::try_from(kept) {
            Ok(kept) => RescaleStep::Rescaled(kept),
            Err(_) => RescaleStep::AlreadyDone,
        })
    }
}

/// How long the rescaler waits between checks. Short against the period, so the
/// rescale happens soon after each period starts, on whichever worker checks first.
fn check_every(interval: Duration) -> Duration {
    (interval / 10).clamp(Duration::from_millis(100), Duration::from_secs(10))
}

impl Daemon for Rescaler {
    const NAME: &'static str = "view-rescaler";
    type Error = CacheError;

    async fn tick(&mut self) -> Result<Duration, CacheError> {
        if let RescaleStep::Rescaled(kept) = self.step().await? {
            tracing::info!(kept, "rescaled item views");
        }
        Ok(check_every(self.interval))
    }
}
