//! The session cleaner: keeps the number of sessions at or under a cap by removing
//! the oldest (least recently seen) ones with everything they own.
//!
//! The cap is split evenly over the shards of the session index (one in the book
//! layout, S in the cluster layout: `cap / S` each, which holds the total to the cap
//! as tokens spread evenly over the shards). A step visits every shard: it reads the
//! shard's oldest tokens with their last-seen times, then one Lua script deletes
//! those still as old as when read (their `login:` entry, `recent:` entry,
//! `viewed:<token>` and `cart:<token>`), checking and deleting in one call, so a
//! session touched in between survives (the book read, then deleted in separate
//! steps, and lost sessions refreshed in between). Any number of cleaners may run at
//! once: a token another cleaner removed is skipped, and no shard loses more than
//! its excess.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::RedisConn;

use crate::daemon::Daemon;
use crate::keys::{Keys, Shard};
use crate::{CacheError, scripts};

/// The default most sessions kept (DESIGN.md: 10 million).
pub const DEFAULT_CAP: u64 = 10_000_000;
/// The default most sessions removed per step: small enough that one script call
/// never blocks Redis for long (about 100 us for 100 sessions), large enough to
/// outpace session creation.
pub const DEFAULT_BATCH: u32 = 100;
/// The largest batch accepted: a batch's sessions are two keys and two arguments
/// each of one script call, which Redis holds in memory while it runs.
pub const MAX_BATCH: u32 = 2_000;
/// The pause when nothing is over the cap, as in the book.
pub const IDLE_PAUSE: Duration = Duration::from_secs(1);

/// What one step did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CleanerStep {
    /// Removed this many sessions; there may be more to remove.
    Cleaned(u64),
    /// At or under the cap: nothing removed.
    Idle,
}

/// Why a cleaner could not be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("cleaner batch must be 1..={MAX_BATCH}, got {0}")]
pub struct BadBatch(pub u32);

/// Removes the oldest sessions beyond a cap.
#[derive(Clone)]
pub struct SessionCleaner {
    conn: RedisConn,
    keys: Keys,
    cap: u64,
    batch: u32,
    removed: Arc<AtomicU64>,
}

impl SessionCleaner {
    /// A cleaner keeping at most `cap` sessions, removing up to `batch` per step.
    pub fn new(conn: RedisConn, keys: Keys, cap: u64, batch: u32) -> Result<Self, BadBatch> {
        if !(1..=MAX_BATCH).contains(&batch) {
            return Err(BadBatch(batch));
        }
        Ok(Self {
            conn,
            keys,
            cap,
            batch,
            removed: Arc::default(),
        })
    }

    /// How many sessions this cleaner (and its clones) removed, for metrics.
    pub fn removed_counter(&self) -> Arc<AtomicU64> {
        self.removed.clone()
    }

    /// Removes up to `batch` of the oldest sessions of each shard that holds more
    /// than its share of `cap`.
    pub async fn step(&self) -> Result<CleanerStep, CacheError> {
        let shards = self.keys.shards();
        // Rounded up, so S shards never hold less than the cap between them.
        let shard_cap = self.cap.div_ceil(shards.len() as u64);
        let mut removed = 0;
        for shard in shards {
            removed += self.clean_shard(shard, shard_cap).await?;
        }
        self.removed.fetch_add(removed, Ordering::Relaxed);
        Ok(if removed == 0 {
            CleanerStep::Idle
        } else {
            CleanerStep::Cleaned(removed)
        })
    }
}

impl SessionCleaner {
    async fn clean_shard(&self, shard: Shard, cap: u64) -> Result<u64, CacheError> {
        let mut conn = self.conn.clone();
        let recent = self.keys.recent_in(shard);
        let (size, oldest): (u64, Vec<(String, String)>) = redis::pipe()
            .zcard(recent)
            .cmd("ZRANGE")
            .arg(recent)
            .arg(0)
            .arg(i64::from(self.batch) - 1)
            .arg("WITHSCORES")
            .query_async(&mut conn)
            .await?;
        let excess = size.saturating_sub(cap) as usize;
        if excess == 0 {
            return Ok(0);
        }
        let mut call = scripts::CLEAN_SESSIONS.prepare_invoke();
        call.key(recent).key(self.keys.login_in(shard)).arg(cap);
        for (member, seen) in oldest.iter().take(excess) {
            call.key(self.keys.viewed_by_member(shard, member))
                .key(self.keys.cart_member(shard, member))
                .arg(member)
                .arg(seen);
        }
        Ok(call.invoke_async(&mut conn).await?)
    }
}

impl Daemon for SessionCleaner {
    const NAME: &'static str = "session-cleaner";

    async fn tick(&mut self) -> Result<Duration, CacheError> {
        Ok(match self.step().await? {
            CleanerStep::Cleaned(n) => {
                tracing::debug!(removed = n, "cleaned sessions");
                Duration::ZERO
            }
            CleanerStep::Idle => IDLE_PAUSE,
        })
    }
}
