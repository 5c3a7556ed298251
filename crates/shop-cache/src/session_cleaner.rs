//! The session cleaner: keeps the number of sessions at or under a cap by removing
//! the oldest (least recently seen) ones with everything they own, guests first,
//! then anonymous shoppers, logged-in shoppers last, and removes the sessions past their lifetimes whatever the cap
//! ([`Lifetimes`]: guests idle longer than a day, any session idle longer than 30
//! days, logins older than 90 days; configurable). The touch refuses an expired
//! token too, so the lifetimes hold exactly between the cleaner's rounds.
//!
//! Guests first: a session neither logged in nor holding a cart is also listed in
//! `guests:` (kept by the touch, the cart and login; see [`crate::session`]). While
//! a shard has guests, its excess is taken from them, oldest first; a logged-in
//! session or a cart goes only once no guest is left, so a flood of new sessions
//! (a crawler that returns cookies, a bot making up tokens) removes only its own
//! kind. Guests idle longer than [`DEFAULT_GUEST_IDLE`] go whatever the cap.
//! Anonymous shoppers next: a session not logged in that holds a cart is listed in
//! `anonymous:`, and once no guest is left the excess is taken from them, oldest
//! first; a logged-in session goes only once neither is left, so a flood of carts
//! without a login (cookieless `POST /cart`, each starting a session) removes
//! other such carts, never a shopper who logged in.
//!
//! The cap is split evenly over the shards of the session index (one in the book
//! layout, S in the cluster layout: `cap / S` each, which holds the total to the cap
//! as tokens spread evenly over the shards). A step visits every shard with one
//! call of a Lua script (`clean_sessions.lua`), in one of two ways:
//! - **on one node** (the book layout) the call picks the candidates and removes
//!   them (their `login:` entry, `recent:` entry, `viewed:<token>` and
//!   `cart:<token>`), atomically: the script names each candidate's keys itself
//!   from the stems [`Keys::session_stems`] gives it, which Redis allows on one
//!   node. No candidate can change between its pick and its removal, and no
//!   token travels to the cleaner and back;
//! - **on a cluster** a script must be given every key it touches, so it cannot
//!   remove in the call that picks: each call removes the candidates the shard's
//!   previous call picked, those still as old as when picked, and picks the next
//!   ones, returned as tokens by kind (idle, logged in too long, guests,
//!   anonymous, oldest)
//!   with their index's bound at the pick. A candidate still within its bound,
//!   among the front of its index, is unchanged: every touch writes a later time
//!   (Redis's clock), so no time is read, returned or compared per session. A
//!   shard with nothing carried over (the first step, or after an idle one) gets
//!   a call that only picks first, so a step removes what it finds.
//!
//! Either way checking and deleting are one call, which keeps a session touched in
//! between (the book read, then deleted in separate steps, and lost sessions
//! refreshed in between). The logged-in sessions a step removed that have a login
//! time (every login of the shop's) leave their users' indexes of sessions in the
//! next step, alongside its calls, or at once when the step found nothing more to
//! do. Any number of cleaners may run at once: a token another cleaner removed is
//! skipped, and no shard loses more than its excess.
//!
//! Pacing. A step's script blocks Redis while it deletes, and every request waits
//! behind it; at full speed (a backlog of millions, steps back to back) the cleaner
//! takes most of Redis and of the machine, and every request's latency rises with
//! it (the figures: BENCHMARKS.md, "Session cleaner"). So the daemon loop
//! ([`Daemon::tick`]) paces itself by what its own steps cost:
//! - the script reports how long it ran (Redis's clock, before and after): a step
//!   whose scripts blocked Redis longer than [`BLOCK_BUDGET`] halves the next batch,
//!   down to [`MIN_BATCH`]; one under half of it doubles the batch back, up to the
//!   configured one. A request never waits behind more than about that budget;
//! - after a step that took `t` from start to answer (Redis time, round trips, and
//!   queueing behind everybody else's commands, which grows with load), it pauses
//!   `t * (1 - duty) / duty`, so it spends at most the `duty` share of the time
//!   cleaning (default [`DEFAULT_DUTY`]), and less of Redis the busier Redis is.
//!
//! [`SessionCleaner::step`] itself is unpaced, at the configured batch: tests and
//! `bench throughput` call it directly to measure the raw speed.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::RedisConn;

use crate::daemon::Daemon;
use crate::domain::UserId;
use crate::keys::{Keys, Shard};
use crate::session::{Lifetimes, SessionToken};
use crate::{CacheError, scripts};

/// The default most sessions kept: the 10 million live sessions the shop is sized for.
pub const DEFAULT_CAP: u64 = 10_000_000;
/// The default most sessions removed per step: small enough that one script call
/// never blocks Redis for long (about 100 us for 100 sessions), large enough to
/// outpace session creation.
pub const DEFAULT_BATCH: u32 = 100;
/// The largest batch accepted: a batch's sessions are two keys and two arguments
/// each of one script call, which Redis holds in memory while it runs.
pub const MAX_BATCH: u32 = 2_000;
/// The default idle time after which a guest session (not logged in, no cart) is
/// removed whatever the cap (see [`Lifetimes`]).
pub use crate::session::DEFAULT_GUEST_IDLE;
/// The pause when nothing is over the cap, as in the book.
pub const IDLE_PAUSE: Duration = Duration::from_secs(1);
/// The default share of time the daemon spends in steps while it has work (see the
/// module docs): enough to remove sessions many times faster than 5 million users
/// a day create them (what it removes under load: BENCHMARKS.md, `bench-views`).
pub const DEFAULT_DUTY: f64 = 0.1;
/// A step whose scripts blocked Redis longer than this halves the next batch (see
/// the module docs).
pub const BLOCK_BUDGET: Duration = Duration::from_micros(500);
/// The smallest batch pacing shrinks to.
pub const MIN_BATCH: u32 = 10;

/// What one step did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CleanerStep {
    /// Removed this many sessions; there may be more to remove.
    Cleaned(u64),
    /// At or under the cap: nothing removed.
    Idle,
}

/// Why a cleaner could not be built.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum BadBatch {
    /// The batch is out of range.
    #[error("cleaner batch must be 1..={MAX_BATCH}, got {0}")]
    Batch(u32),
    /// The duty share is out of range.
    #[error("cleaner duty must be more than 0 and at most 1, got {0}")]
    Duty(f64),
}

/// How the daemon loop spaces its steps (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Pace {
    duty: f64,
    /// The batch of the next paced step.
    batch: u32,
    /// The configured batch: the most pacing grows back to.
    most: u32,
}

impl Pace {
    /// The pause after a step that removed sessions, took `took` from start to
    /// answer and blocked Redis for `blocked` (its scripts' run time); adapts the
    /// batch.
    pub fn after(&mut self, took: Duration, blocked: Duration) -> Duration {
        if blocked > BLOCK_BUDGET {
            self.batch = (self.batch / 2).max(MIN_BATCH.min(self.most));
        } else if blocked < BLOCK_BUDGET / 2 {
            self.batch = self.batch.saturating_mul(2).min(self.most);
        }
        if self.duty >= 1.0 {
            Duration::ZERO
        } else {
            took.mul_f64((1.0 - self.duty) / self.duty)
        }
    }

    /// The batch of the next paced step.
    pub fn batch(&self) -> u32 {
        self.batch
    }
}

/// Removes the oldest sessions beyond a cap.
#[derive(Clone)]
pub struct SessionCleaner {
    conn: RedisConn,
    keys: Keys,
    cap: u64,
    batch: u32,
    pace: Pace,
    lifetimes: Lifetimes,
    removed: Arc<AtomicU64>,
    carry: Arc<tokio::sync::Mutex<Carry>>,
}

impl SessionCleaner {
    /// A cleaner keeping at most `cap` sessions, removing up to `batch` per step,
    /// paced at [`DEFAULT_DUTY`] in the daemon loop.
    pub fn new(conn: RedisConn, keys: Keys, cap: u64, batch: u32) -> Result<Self, BadBatch> {
        if !(1..=MAX_BATCH).contains(&batch) {
            return Err(BadBatch::Batch(batch));
        }
        Ok(Self {
            conn,
            keys,
            cap,
            batch,
            pace: Pace {
                duty: DEFAULT_DUTY,
                batch,
                most: batch,
            },
            lifetimes: Lifetimes::default(),
            removed: Arc::default(),
            carry: Arc::default(),
        })
    }

    /// The same cleaner spending at most the `duty` share (0 < duty <= 1; 1: no
    /// pauses) of its time in steps while it has work.
    pub fn with_duty(mut self, duty: f64) -> Result<Self, BadBatch> {
        if !(duty > 0.0 && duty <= 1.0) {
            return Err(BadBatch::Duty(duty));
        }
        self.pace.duty = duty;
        Ok(self)
    }

    /// The same cleaner removing guest sessions (neither logged in nor holding a
    /// cart) once they have been idle for `idle` (at least a second), whatever the
    /// cap; [`DEFAULT_GUEST_IDLE`] unless set.
    pub fn with_guest_idle(mut self, idle: Duration) -> Self {
        self.lifetimes.guest_idle = idle;
        self
    }

    /// The same cleaner removing every session past `lifetimes` (the same the
    /// touch enforces: [`crate::session::Sessions::with_lifetimes`]), whatever the
    /// cap; the defaults unless set.
    pub fn with_lifetimes(mut self, lifetimes: Lifetimes) -> Self {
        self.lifetimes = lifetimes;
        self
    }

    /// How many sessions this cleaner (and its clones) removed, for metrics.
    pub fn removed_counter(&self) -> Arc<AtomicU64> {
        self.removed.clone()
    }

    /// Removes, in each shard, up to `batch` sessions: those past their lifetimes
    /// (idle too long, logged in too long ago) and, where the shard holds more
    /// than its share of `cap`, its oldest sessions: guests first, a shopper
    /// (logged in, or with a cart) only once the shard has no guest left.
    pub async fn step(&self) -> Result<CleanerStep, CacheError> {
        Ok(self.step_of(self.batch).await?.0)
    }

    /// A step at `batch`, with how long its scripts blocked Redis.
    async fn step_of(&self, batch: u32) -> Result<(CleanerStep, Duration), CacheError> {
        let shards: Vec<Shard> = self.keys.shards().collect();
        // Rounded up, so S shards never hold less than the cap between them.
        let shard_cap = self.cap.div_ceil(shards.len() as u64);
        // One step at a time per cleaner (and its clones): they share the carry.
        let mut carry = self.carry.lock().await;
        let carry = &mut *carry;
        carry.next.resize_with(shards.len(), Picked::default);
        // The logged-in sessions the last steps removed leave their users' indexes
        // alongside this step's calls (the same round trip on one node). A copy:
        // they stay carried until that is done, whatever stops the step.
        let ended = carry.ended.clone();
        let mut done = Cleaned::default();
        let mut fresh = Vec::new();
        let (unindexed, cleaned) = tokio::join!(
            crate::session::user_sessions::unindex(&self.conn, &self.keys, &ended),
            async {
                for shard in &shards {
                    let next = &mut carry.next[shard.get() as usize];
                    let mut shard_done = self.clean_shard(*shard, shard_cap, batch, next).await?;
                    fresh.append(&mut shard_done.ended);
                    done.add(shard_done);
                }
                Ok::<_, CacheError>(())
            }
        );
        // What was removed is counted, and its owners carried, even when a later
        // shard failed.
        self.removed.fetch_add(done.removed, Ordering::Relaxed);
        if unindexed.is_ok() {
            carry.ended.drain(..ended.len());
        }
        carry.ended.extend(fresh);
        // Past the bound, entries are left to the listing, which drops them.
        carry.ended.truncate(MAX_HELD_ENDED);
        unindexed?;
        cleaned?;
        // A step that only mended guest entries or picked candidates made progress
        // too: the next one goes on at once rather than after the idle pause.
        let step = if done.removed == 0 && done.mended == 0 && done.picked == 0 {
            CleanerStep::Idle
        } else {
            CleanerStep::Cleaned(done.removed)
        };
        if step == CleanerStep::Idle {
            // No next step is due soon: the indexes are set right now.
            self.unindex_carried(carry).await?;
        }
        Ok((step, done.blocked))
    }

    /// Takes the logged-in sessions removed so far out of their users' indexes (a
    /// graceful stop: the next step would have).
    pub async fn finish_unindex(&self) -> Result<(), CacheError> {
        self.unindex_carried(&mut *self.carry.lock().await).await
    }

    /// Takes the carried logged-in removals out of their users' indexes; they
    /// stay carried until that is done, whatever stops it.
    async fn unindex_carried(&self, carry: &mut Carry) -> Result<(), CacheError> {
        let ended = carry.ended.clone();
        crate::session::user_sessions::unindex(&self.conn, &self.keys, &ended).await?;
        carry.ended.drain(..ended.len());
        Ok(())
    }
}

/// The most logged-in removals kept for a later unindex while Redis fails (each
/// is a token and a user id); past it, their index entries are left to the listing.
const MAX_HELD_ENDED: usize = 100_000;

/// The candidates of one kind a cleaning call picked for the next one (see
/// `clean_sessions.lua`): the bound of their index at the pick, as Redis wrote it,
/// and their tokens.
type Kind = (String, Vec<String>);

/// The kinds of candidates, in the script's order: idle, login, guests,
/// anonymous, oldest.
const KINDS: usize = 5;

/// What `clean_sessions.lua` answers: removed, microseconds, mended, the removed
/// logged-in sessions' owners, the next candidates of each kind and when they were
/// picked.
type CallAnswer = (u64, u64, u64, Vec<(String, String)>, Vec<Kind>, String);

/// A shard's candidates for its next call, and when they were picked (Redis's
/// clock, as the script wrote it).
#[derive(Debug, Default)]
struct Picked {
    kinds: Vec<Kind>,
    at: String,
}

impl Picked {
    /// How many candidates there are, of every kind.
    fn len(&self) -> usize {
        self.kinds.iter().map(|(_, tokens)| tokens.len()).sum()
    }

    /// Whether there is no candidate.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// What a cleaner carries from one step to the next.
#[derive(Debug, Default)]
struct Carry {
    /// Per shard, the candidates the last call picked.
    next: Vec<Picked>,
    /// Logged-in sessions removed, still listed in their users' indexes.
    ended: Vec<(SessionToken, UserId)>,
}

/// What cleaning a shard (or a step) did.
#[derive(Debug, Default)]
struct Cleaned {
    /// Sessions removed.
    removed: u64,
    /// Guest or login entries dropped or set right (left by code that does not
    /// keep them).
    mended: u64,
    /// Candidates picked for the next step.
    picked: u64,
    /// How long the scripts blocked Redis.
    blocked: Duration,
    /// The logged-in sessions removed.
    ended: Vec<(SessionToken, UserId)>,
}

impl Cleaned {
    fn add(&mut self, other: Cleaned) {
        self.removed += other.removed;
        self.mended += other.mended;
        self.picked += other.picked;
        self.blocked += other.blocked;
        self.ended.extend(other.ended);
    }
}

impl SessionCleaner {
    /// On one node: picks and removes the shard's candidates in one script call
    /// (`next` stays empty). On a cluster: removes the shard's candidates picked by
    /// the last call (`next`), if each is still what it was, and picks the next
    /// ones into `next`: one script call; a shard with nothing carried over gets a
    /// call that only picks first, so a step removes what it finds.
    async fn clean_shard(
        &self,
        shard: Shard,
        cap: u64,
        batch: u32,
        next: &mut Picked,
    ) -> Result<Cleaned, CacheError> {
        let mut done = Cleaned::default();
        if next.is_empty() {
            done.add(self.call(shard, cap, batch, next).await?);
            if next.is_empty() {
                return Ok(done);
            }
        }
        done.add(self.call(shard, cap, batch, next).await?);
        // Counted once: the pick-only call's candidates are this call's.
        done.picked = next.len() as u64;
        Ok(done)
    }

    /// One call of the cleaning script: removes `picked` as they qualify and
    /// replaces them with the next ones (on one node: picks and removes, and
    /// leaves `picked` empty).
    async fn call(
        &self,
        shard: Shard,
        cap: u64,
        batch: u32,
        picked: &mut Picked,
    ) -> Result<Cleaned, CacheError> {
        let mut call = scripts::CLEAN_SESSIONS.prepare_invoke();
        call.key(self.keys.recent_in(shard))
            .key(self.keys.login_in(shard))
            .key(self.keys.guests_in(shard))
            .key(self.keys.logins_in(shard))
            .key(self.keys.anonymous_in(shard))
            .arg(cap)
            .arg(self.lifetimes.guest_idle().as_secs())
            .arg(self.lifetimes.idle().as_secs())
            .arg(self.lifetimes.absolute().as_secs())
            .arg(batch)
            .arg(if picked.is_empty() {
                "0"
            } else {
                picked.at.as_str()
            });
        picked.kinds.resize_with(KINDS, Kind::default);
        for (bound, tokens) in &picked.kinds {
            call.arg(tokens.len()).arg(bound);
        }
        // On one node the script picks and removes in this call, naming the
        // candidates' keys from these stems; on a cluster it is given them.
        let (viewed, cart) = self.keys.session_stems(shard).unwrap_or(("", ""));
        call.arg(viewed).arg(cart);
        for member in picked.kinds.iter().flat_map(|(_, tokens)| tokens) {
            call.key(self.keys.viewed_by_member(shard, member))
                .key(self.keys.cart_member(shard, member))
                .arg(member);
        }
        let (removed, micros, mended, owners, kinds, at): CallAnswer =
            call.invoke_async(&mut self.conn.clone()).await?;
        if kinds.len() != KINDS {
            return Err(CacheError::Corrupt {
                what: "the cleaning script's answer",
            });
        }
        *picked = Picked { kinds, at };
        let ended = owners
            .into_iter()
            .filter_map(|(token, user)| Some((token.parse().ok()?, user.parse().ok()?)))
            .collect();
        Ok(Cleaned {
            removed,
            mended,
            picked: picked.len() as u64,
            blocked: Duration::from_micros(micros),
            ended,
        })
    }
}

impl Daemon for SessionCleaner {
    const NAME: &'static str = "session-cleaner";
    type Error = CacheError;

    async fn tick(&mut self) -> Result<Duration, CacheError> {
        let started = Instant::now();
        let (step, blocked) = self.step_of(self.pace.batch).await?;
        Ok(match step {
            CleanerStep::Cleaned(n) => {
                let pause = self.pace.after(started.elapsed(), blocked);
                tracing::debug!(
                    removed = n,
                    ?blocked,
                    next_batch = self.pace.batch,
                    ?pause,
                    "cleaned sessions"
                );
                pause
            }
            CleanerStep::Idle => IDLE_PAUSE,
        })
    }

    async fn finish(&mut self) {
        if let Err(error) = self.finish_unindex().await {
            // Left to the listing, which drops entries whose session is gone.
            tracing::warn!(%error, "session cleaner: users' indexes not updated at the stop");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pace(duty: f64, batch: u32) -> Pace {
        Pace {
            duty,
            batch,
            most: batch,
        }
    }

    #[test]
    fn the_pause_keeps_steps_to_the_duty_share() {
        let mut p = pace(0.1, 100);
        let pause = p.after(Duration::from_micros(500), Duration::from_micros(100));
        assert_eq!(pause, Duration::from_micros(4_500));
        let mut full = pace(1.0, 100);
        let pause = full.after(Duration::from_micros(500), Duration::from_micros(100));
        assert_eq!(pause, Duration::ZERO);
    }

    #[test]
    fn slow_steps_shrink_the_batch_and_fast_ones_grow_it_back() {
        let mut p = pace(0.5, 100);
        let took = Duration::from_millis(5);
        let long = BLOCK_BUDGET * 3;
        p.after(took, long);
        assert_eq!(p.batch(), 50);
        for _ in 0..10 {
            p.after(took, long);
        }
        assert_eq!(p.batch(), MIN_BATCH, "never below the floor");
        p.after(took, BLOCK_BUDGET * 3 / 4);
        assert_eq!(p.batch(), MIN_BATCH, "a step within budget keeps the batch");
        for _ in 0..10 {
            p.after(took, BLOCK_BUDGET / 10);
        }
        assert_eq!(p.batch(), 100, "never above the configured batch");
    }

    #[test]
    fn a_batch_under_the_floor_is_kept() {
        let mut p = pace(0.5, 3);
        p.after(BLOCK_BUDGET * 2, BLOCK_BUDGET * 2);
        assert_eq!(p.batch(), 3);
    }
}
