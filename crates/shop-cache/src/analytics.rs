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
use crate::keys::Keys;
use crate::{CacheError, scripts};

/// How many items the rescale keeps: twice the page cache's top 10,000, so items just
/// below the line keep their counts and can climb back.
pub const DEFAULT_KEEP: u64 = 20_000;
/// How long a retired item's views are not counted ([`Keys::unranked`]): longer
/// than a web server holds views in its batch (a tenth of a second, or while
/// Redis is away: the batch is kept and sent when it returns).
pub const UNRANKED_FOR: Duration = Duration::from_secs(3_600);

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
    /// page and the page cache's top at once, and views of it a web server still
    /// holds in its batch are not counted when written ([`Keys::unranked`], for
    /// [`UNRANKED_FOR`]; entries older than that are trimmed here, and the
    /// whole list goes that long after the last retirement).
    pub async fn forget(&self, item: ItemId) -> Result<(), CacheError> {
        let now = crate::clock::unix_now();
        redis::pipe()
            .atomic()
            .zrem(self.keys.item_views(), item)
            .ignore()
            .zadd(self.keys.unranked(), item, now)
            .ignore()
            .zrembyscore(
                self.keys.unranked(),
                "-inf",
                now - UNRANKED_FOR.as_secs_f64(),
            )
            .ignore()
            .expire(self.keys.unranked(), UNRANKED_FOR.as_secs() as i64)
            .ignore()
            .exec_async(&mut self.conn.clone())
            .await?;
        Ok(())
    }

    /// Lets `item`'s views count again (it is sold again after a retirement).
    pub async fn rank_again(&self, item: ItemId) -> Result<(), CacheError> {
        redis::cmd("ZREM")
            .arg(self.keys.unranked())
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
/// every count, so new favourites can rise. Safe to run in any number of processes.
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
    /// on the server's clock.
    pub async fn step(&self) -> Result<RescaleStep, CacheError> {
        let kept: i64 = scripts::RESCALE_VIEWS
            .key(self.keys.item_views())
            .key(self.keys.views_rescaled())
            .arg(self.interval.as_secs())
            .arg(self.keep)
            .invoke_async(&mut self.conn.clone())
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

/// How often a process reads its copy of the ranking's top ([`TopItems`]).
pub const TOP_REFRESH_EVERY: Duration = Duration::from_secs(1);
/// How old a copy of the top may be and still decide anything: past it (Redis
/// unreachable, the refresher stopped), the page cache asks Redis again per view.
pub const TOP_MAX_AGE: Duration = Duration::from_secs(5);

/// This process's copy of the items ranked below a limit in `viewed:` (the page
/// cache's gate, the book's `can_cache`), read once a second by
/// [`TopItemsRefresher`] instead of a `ZRANK` per view of a cached page: on a
/// cluster `viewed:` is one key on one node, and a command per page view there
/// was its hottest path. An item that leaves the top is seen within a second (its
/// page stays cached a second longer; one that enters is still asked about, see
/// `shop_page_cache::PageStore::with_top`); the copy is trusted for
/// [`TOP_MAX_AGE`] only.
#[derive(Clone)]
pub struct TopItems {
    conn: RedisConn,
    keys: Keys,
    limit: u64,
    copy: std::sync::Arc<std::sync::RwLock<TopCopy>>,
}

#[derive(Default)]
struct TopCopy {
    items: std::collections::HashSet<ItemId>,
    read_at: Option<std::time::Instant>,
}

impl TopItems {
    /// The top `limit` of the ranking under `keys`; empty (and not trusted) until
    /// the first [`TopItems::refresh`].
    pub fn new(conn: RedisConn, keys: Keys, limit: u64) -> Self {
        Self {
            conn,
            keys,
            limit,
            copy: Default::default(),
        }
    }

    /// Reads the top again (one `ZRANGE`); returns how many items it holds.
    pub async fn refresh(&self) -> Result<usize, CacheError> {
        if self.limit == 0 {
            self.replace(Default::default());
            return Ok(0);
        }
        let raw: Vec<String> = redis::cmd("ZRANGE")
            .arg(self.keys.item_views())
            .arg(0)
            .arg(self.limit - 1)
            .query_async(&mut self.conn.clone())
            .await?;
        let items: std::collections::HashSet<ItemId> =
            raw.iter().filter_map(|item| item.parse().ok()).collect();
        let n = items.len();
        self.replace(items);
        Ok(n)
    }

    fn replace(&self, items: std::collections::HashSet<ItemId>) {
        let mut copy = self.copy.write().unwrap_or_else(|e| e.into_inner());
        *copy = TopCopy {
            items,
            read_at: Some(std::time::Instant::now()),
        };
    }

    /// Whether `item` ranks below the limit, by the copy; `None` when the copy is
    /// missing or older than [`TOP_MAX_AGE`] (ask Redis).
    pub fn contains(&self, item: ItemId) -> Option<bool> {
        let copy = self.copy.read().unwrap_or_else(|e| e.into_inner());
        let fresh = copy.read_at.is_some_and(|at| at.elapsed() < TOP_MAX_AGE);
        fresh.then(|| copy.items.contains(&item))
    }
}

/// The daemon that keeps a [`TopItems`] copy current, every
/// [`TOP_REFRESH_EVERY`]; each web server runs one.
pub struct TopItemsRefresher(pub TopItems);

impl Daemon for TopItemsRefresher {
    const NAME: &'static str = "top-items";
    type Error = CacheError;

    async fn tick(&mut self) -> Result<Duration, CacheError> {
        self.0.refresh().await?;
        Ok(TOP_REFRESH_EVERY)
    }
}
