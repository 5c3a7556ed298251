//! The session cleaner: keeps the number of sessions at or under a cap by removing
//! the oldest (least recently seen) ones with everything they own.
//!
//! Each step is one Lua script that picks the oldest tokens of `recent:` and deletes
//! their `login:` entry, `recent:` entry, `viewed:<token>` and `cart:<token>` in the
//! same call (the book read, then deleted in separate steps, and lost sessions
//! refreshed in between). Any number of cleaners may run at once.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::RedisConn;

use crate::daemon::Daemon;
use crate::keys::Keys;
use crate::{CacheError, scripts};

/// The default most sessions kept (DESIGN.md: 10 million).
pub const DEFAULT_CAP: u64 = 10_000_000;
/// The default most sessions removed per step: small enough that one script call
/// never blocks Redis for long (about 100 us for 100 sessions), large enough to
/// outpace session creation.
pub const DEFAULT_BATCH: u32 = 100;
/// The largest batch accepted: the script passes a batch's keys to one command,
/// and Lua's stack takes a few thousand arguments.
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

    /// Removes up to `batch` of the oldest sessions if there are more than `cap`.
    pub async fn step(&self) -> Result<CleanerStep, CacheError> {
        let removed: u64 = scripts::CLEAN_SESSIONS
            .key(self.keys.recent())
            .key(self.keys.login())
            .arg(self.cap)
            .arg(self.batch)
            .arg(self.keys.viewed_by_prefix())
            .arg(self.keys.cart_prefix())
            .invoke_async(&mut self.conn.clone())
            .await?;
        self.removed.fetch_add(removed, Ordering::Relaxed);
        Ok(if removed == 0 {
            CleanerStep::Idle
        } else {
            CleanerStep::Cleaned(removed)
        })
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
