//! Login sessions keyed by a random token cookie: who is logged in, when each session
//! was last seen, and what it viewed (the book's `login:`, `recent:`, `viewed:<token>`),
//! plus the global view counts `viewed:` that decide what the page cache keeps, and
//! each item's distinct viewers (`viewers:<item>`, for [`crate::insights`]).
//!
//! [`Sessions::touch`] is called on every request and costs one round trip: a Lua
//! script, not a pipeline, because it does what a pipeline cannot: it refuses tokens
//! the shop never issued (a check and a write that must be atomic, so no client can
//! choose its token), orders the session's views, and returns the session's user,
//! which saves a second round trip per request.
//!
//! It runs on every request, so it does as little as it can (the figures are in
//! BENCHMARKS.md, from `cargo bench -p shop-cache --bench throughput`):
//! - the item's global count and distinct viewers are not written per view but
//!   counted in this process and written every [`VIEW_FLUSH_EVERY`] by
//!   [`ViewFlusher`], one `ZINCRBY` and one `PFADD` per item per flush (see its docs
//!   for what a crash can lose). On a cluster this also keeps `viewed:`, one key on
//!   one node, from taking a command per page view;
//! - the script makes only the calls it needs (see `lua/touch.lua`);
//! - a view's score in `viewed:<token>` is a small sequence number, not a float
//!   time, which Redis stores in a byte or two instead of a float's 17 characters.
//!   The order is the same, so the book's code still reads it.
//!
//! On a cluster (the cluster layout) the script touches only the session's shard.
//! A login moves the session to a new token in the same shard, so it stays one
//! script.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use redis::AsyncCommands;

use crate::RedisConn;
use crate::daemon::Daemon;
/// The token type lives with the other identifiers; re-exported where it is used.
pub use crate::domain::SessionToken;
use crate::domain::{ItemId, UserId};
use crate::keys::Keys;
use crate::{CacheError, scripts};

/// How many of a session's most recent item views `viewed:<token>` keeps.
pub const HISTORY_LEN: usize = 25;

/// How long a login form's one-time key remembers the session it made.
pub const LOGIN_ONCE_TTL: std::time::Duration = std::time::Duration::from_secs(60);
/// How long a second submit of a login form waits, in steps, for the first one to
/// finish (a login is a few milliseconds; after a second it logs in on its own).
const LOGIN_ONCE_WAIT_STEP: Duration = Duration::from_millis(20);
const LOGIN_ONCE_WAIT_STEPS: u32 = 50;

/// What [`Sessions::touch_existing`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Touched {
    /// A live session, logged in as this user (or a guest).
    Known(Option<UserId>),
    /// No such session (never issued, or cleaned): nothing was recorded.
    Unknown,
}

/// The session operations over one Redis. Clone it freely: the connection is shared.
#[derive(Clone)]
pub struct Sessions {
    conn: RedisConn,
    keys: Keys,
    /// Shared by every clone: one batch of views per process.
    views: Arc<ViewBatch>,
}

impl Sessions {
    /// Sessions stored under `keys`.
    pub fn new(conn: RedisConn, keys: Keys) -> Self {
        Self {
            conn,
            keys,
            views: Arc::default(),
        }
    }

    /// Records one request of a session in one round trip: last seen now, the user
    /// when logged in, and for an item page the view (kept in the session's 25 most
    /// recent, and counted in the global `viewed:` ranking). Returns the user the
    /// token is logged in as, so no second call to [`Sessions::check_token`] is needed.
    /// An unknown token starts a session (the book's behaviour).
    pub async fn touch(
        &self,
        token: &SessionToken,
        user: Option<UserId>,
        item: Option<ItemId>,
    ) -> Result<Option<UserId>, CacheError> {
        match self.run_touch(token, user, item, false, true).await? {
            Touched::Known(user) => Ok(user),
            Touched::Unknown => unreachable!("the script only refuses tokens that must exist"),
        }
    }

    /// [`Sessions::touch`] for a token presented by a client: an unknown token is
    /// refused ([`Touched::Unknown`], nothing written), so a client cannot choose its
    /// own token; the caller issues a fresh one instead.
    pub async fn touch_existing(
        &self,
        token: &SessionToken,
        item: Option<ItemId>,
    ) -> Result<Touched, CacheError> {
        self.run_touch(token, None, item, true, true).await
    }

    /// The touch of an item page sent before the page's answer is known, so that
    /// it travels with the page's own lookup and a page view costs one round trip
    /// of waiting: [`Sessions::touch_existing`] for a token a client presented
    /// (`presented`), else [`Sessions::touch`] for one this process just made, with
    /// the item put in the history but not yet counted. End it with
    /// [`Sessions::settle_view`].
    pub async fn touch_ahead(
        &self,
        token: &SessionToken,
        presented: bool,
        item: ItemId,
    ) -> Result<Touched, CacheError> {
        self.run_touch(token, None, Some(item), presented, false)
            .await
    }

    /// Ends a [`Sessions::touch_ahead`] once the page answered: a `found` page's
    /// view is counted (in this process's batch, no Redis call); otherwise the item
    /// leaves the session's history again (one `ZREM`), so a made-up id never stays
    /// there nor reaches the ranking. (If that touch trimmed the session's oldest
    /// view to make room, that view stays gone.)
    pub async fn settle_view(
        &self,
        token: &SessionToken,
        item: ItemId,
        found: bool,
    ) -> Result<(), CacheError> {
        if found {
            self.views.add(item, token);
            return Ok(());
        }
        redis::cmd("ZREM")
            .arg(self.keys.viewed_by(token))
            .arg(item.get())
            .exec_async(&mut self.conn.clone())
            .await?;
        Ok(())
    }

    async fn run_touch(
        &self,
        token: &SessionToken,
        user: Option<UserId>,
        item: Option<ItemId>,
        must_exist: bool,
        count_view: bool,
    ) -> Result<Touched, CacheError> {
        let opt = |v: Option<u64>| v.map(|v| v.to_string()).unwrap_or_default();
        let mut call = scripts::TOUCH.prepare_invoke();
        // The shard is hashed once per request, not once per key.
        let shard = self.keys.shard_of(token);
        call.key(self.keys.recent_in(shard))
            .key(self.keys.login_in(shard))
            .key(self.keys.viewed_by_member(shard, token.expose()));
        let (known, user): (i64, Option<String>) = call
            .arg(token.expose())
            .arg(opt(user.map(UserId::get)))
            .arg(opt(item.map(ItemId::get)))
            .arg(HISTORY_LEN)
            .arg(if must_exist { "1" } else { "0" })
            .invoke_async(&mut self.conn.clone())
            .await?;
        if let (Some(item), 1, true) = (item, known, count_view) {
            self.views.add(item, token);
        }
        if known == 0 {
            return Ok(Touched::Unknown);
        }
        let user = user
            .map(|raw| {
                raw.parse()
                    .map_err(|_| CacheError::Corrupt { what: "login:" })
            })
            .transpose()?;
        Ok(Touched::Known(user))
    }

    /// The user a token is logged in as, or `None` for a guest or unknown token.
    pub async fn check_token(&self, token: &SessionToken) -> Result<Option<UserId>, CacheError> {
        let raw: Option<String> = redis::cmd("HGET")
            .arg(self.keys.login_of(token))
            .arg(token.expose())
            .query_async(&mut self.conn.clone())
            .await?;
        raw.map(|s| {
            s.parse()
                .map_err(|_| CacheError::Corrupt { what: "login:" })
        })
        .transpose()
    }

    /// Logs `user` in: returns a fresh token (so a token planted before login is
    /// worthless after it), in one atomic step. The old token is gone from every
    /// structure.
    ///
    /// - From a guest session, or one already logged in as `user`, the cart and the
    ///   viewed history move to the new token.
    /// - From a session logged in as someone else (a shared browser), they do not:
    ///   the other user's session ends as on logout, and `user` starts afresh. One
    ///   person's cart never becomes another's.
    /// - With a `once` key (the login form's one-time key), a second login with the
    ///   same key and user within [`LOGIN_ONCE_TTL`] returns the token the first one
    ///   made instead of rotating again: a double-submitted form used to rotate
    ///   twice, the second time from an empty guest session, orphaning the cart on the
    ///   first new token.
    pub async fn login(
        &self,
        old: &SessionToken,
        user: UserId,
        once: Option<&str>,
    ) -> Result<SessionToken, CacheError> {
        let Some(form_key) = once else {
            return self.rotate(old, user).await;
        };
        // The one-time key is claimed before the move and holds its result after,
        // so a second submit of the same form (arriving with another session: the
        // first one's cookie is gone) waits for the first and gets its session.
        // It is a key of its own (its own slot in a cluster), not part of the
        // move's script, because the second submit's session may be in another shard.
        let once_key = self.keys.login_once(form_key);
        let mut conn = self.conn.clone();
        let ttl = LOGIN_ONCE_TTL.as_secs();
        let claimed: Option<String> = redis::cmd("SET")
            .arg(&once_key)
            .arg(format!("{user} -"))
            .arg("NX")
            .arg("EX")
            .arg(ttl)
            .query_async(&mut conn)
            .await?;
        if claimed.is_some() {
            let new = match self.rotate(old, user).await {
                Ok(new) => new,
                Err(e) => {
                    // Released, so the retry the user makes is not kept waiting.
                    let _: Result<(), _> = conn.del(&once_key).await;
                    return Err(e);
                }
            };
            redis::cmd("SET")
                .arg(&once_key)
                .arg(format!("{user} {}", new.expose()))
                .arg("XX")
                .arg("EX")
                .arg(ttl)
                .exec_async(&mut conn)
                .await?;
            return Ok(new);
        }
        for _ in 0..LOGIN_ONCE_WAIT_STEPS {
            let made: Option<String> = conn.get(&once_key).await?;
            let Some((by, token)) = made.as_deref().and_then(|m| m.split_once(' ')) else {
                break; // expired meanwhile
            };
            if by != user.to_string() {
                break; // another user's form: their session is not this one's
            }
            if token == "-" {
                // The first submit is still logging in.
                tokio::time::sleep(LOGIN_ONCE_WAIT_STEP).await;
                continue;
            }
            if let Ok(token) = token.parse::<SessionToken>()
                && self.check_token(&token).await? == Some(user)
            {
                return Ok(token);
            }
            break; // that session ended since: log in afresh
        }
        self.rotate(old, user).await
    }

    /// The move itself: a fresh token in the old one's shard, one script.
    async fn rotate(&self, old: &SessionToken, user: UserId) -> Result<SessionToken, CacheError> {
        // In the same shard as the old token, so the move is one script in one slot.
        let new = self.keys.fresh_token_beside(old);
        scripts::LOGIN
            .key(self.keys.recent_of(old))
            .key(self.keys.login_of(old))
            .key(self.keys.viewed_by(old))
            .key(self.keys.viewed_by(&new))
            .key(self.keys.cart(old))
            .key(self.keys.cart(&new))
            .arg(old.expose())
            .arg(new.expose())
            .arg(user)
            .invoke_async::<()>(&mut self.conn.clone())
            .await?;
        Ok(new)
    }

    /// Ends a session: its login, last-seen entry, history and cart are removed
    /// together, so the token is worth nothing afterwards.
    pub async fn logout(&self, token: &SessionToken) -> Result<(), CacheError> {
        redis::pipe()
            .atomic()
            .hdel(self.keys.login_of(token), token.expose())
            .zrem(self.keys.recent_of(token), token.expose())
            .del(self.keys.viewed_by(token))
            .del(self.keys.cart(token))
            .exec_async(&mut self.conn.clone())
            .await?;
        Ok(())
    }

    /// The session's recently viewed items, most recent first.
    pub async fn recently_viewed(&self, token: &SessionToken) -> Result<Vec<ItemId>, CacheError> {
        let raw: Vec<String> = redis::cmd("ZRANGE")
            .arg(self.keys.viewed_by(token))
            .arg(0)
            .arg(-1)
            .arg("REV")
            .query_async(&mut self.conn.clone())
            .await?;
        raw.iter()
            .map(|s| {
                s.parse().map_err(|_| CacheError::Corrupt {
                    what: "viewed:<token>",
                })
            })
            .collect()
    }

    /// How many sessions exist (the size of `recent:`, over every shard), for metrics.
    pub async fn count(&self) -> Result<u64, CacheError> {
        let mut pipe = redis::pipe();
        for shard in self.keys.shards() {
            pipe.zcard(self.keys.recent_in(shard));
        }
        let sizes: Vec<u64> = pipe.query_async(&mut self.conn.clone()).await?;
        Ok(sizes.iter().sum())
    }

    /// Writes the item views counted since the last flush: each item's count into
    /// `viewed:` and its viewers
    /// into `viewers:<item>:<window>`. Returns how many views it wrote. Called every
    /// [`VIEW_FLUSH_EVERY`] by [`ViewFlusher`] and once more at shutdown.
    pub async fn flush_views(&self) -> Result<u64, CacheError> {
        self.views.flush(&self.conn, &self.keys).await
    }

    /// The views counted but not yet written, for metrics.
    pub fn pending_views(&self) -> u64 {
        self.views.pending()
    }
}

/// How often a process writes the views it counted (cluster layout): often enough
/// that the page cache's ranking follows within a blink, rarely enough that a busy
/// item costs one command per tenth of a second instead of one per view.
pub const VIEW_FLUSH_EVERY: Duration = Duration::from_millis(100);

/// The most distinct viewers a batch holds for the `viewers:` counts while Redis is
/// unreachable; beyond it new viewers are dropped (the view counts themselves are
/// integers and are always kept). Bounds the memory an outage can cost.
const MAX_PENDING_VIEWERS: usize = 200_000;

/// The views a process counted and has not yet written (cluster layout).
///
/// What a crash loses: the views of the last [`VIEW_FLUSH_EVERY`] (a tenth of a
/// second of traffic of this one process), in the ranking and the viewer counts.
/// Nothing else: the session, its history and the page itself were written by the
/// touch script. A graceful stop flushes ([`ViewFlusher`] runs one last step), so
/// it loses nothing; a flush that fails keeps its views for the next one.
#[derive(Debug, Default)]
struct ViewBatch {
    pending: Mutex<PendingViews>,
}

#[derive(Debug, Default)]
struct PendingViews {
    items: HashMap<ItemId, ItemViews>,
    viewers: usize,
}

#[derive(Debug, Default)]
struct ItemViews {
    count: u64,
    viewers: Vec<SessionToken>,
}

impl ViewBatch {
    fn add(&self, item: ItemId, token: &SessionToken) {
        let mut pending = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        let full = pending.viewers >= MAX_PENDING_VIEWERS;
        let entry = pending.items.entry(item).or_default();
        entry.count += 1;
        if !full {
            entry.viewers.push(token.clone());
            pending.viewers += 1;
        }
    }

    fn pending(&self) -> u64 {
        let pending = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        pending.items.values().map(|v| v.count).sum()
    }

    async fn flush(&self, conn: &RedisConn, keys: &Keys) -> Result<u64, CacheError> {
        let taken = std::mem::take(&mut *self.pending.lock().unwrap_or_else(|e| e.into_inner()));
        if taken.items.is_empty() {
            return Ok(0);
        }
        // Put back unless written: on an error, and also when this future is dropped
        // mid-write (the daemon loop drops a step in flight at shutdown; the views
        // were then lost before its last step could write them).
        let mut unwritten = Unwritten {
            into: self,
            views: Some(taken),
        };
        let batch = unwritten.views.as_ref().expect("just set");
        let window = crate::insights::current_window();
        let ttl = crate::insights::WINDOW_TTL.as_secs();
        let mut pipe = redis::pipe();
        let mut views = 0;
        for (item, seen) in &batch.items {
            views += seen.count;
            pipe.zincr(keys.item_views(), *item, -(seen.count as f64))
                .ignore();
            if !seen.viewers.is_empty() {
                let key = keys.viewers(*item, window);
                pipe.cmd("PFADD")
                    .arg(&key)
                    .arg(
                        seen.viewers
                            .iter()
                            .map(SessionToken::expose)
                            .collect::<Vec<_>>(),
                    )
                    .ignore();
                // Only a new key gets its lifetime (as the touch script does).
                pipe.cmd("EXPIRE").arg(&key).arg(ttl).arg("NX").ignore();
            }
        }
        // On an error the guard keeps the views for the next flush. (Part of a
        // pipeline may have been written before it failed; counting those again is
        // the lesser error.)
        pipe.exec_async(&mut conn.clone()).await?;
        unwritten.views = None;
        Ok(views)
    }

    fn merge_back(&self, batch: PendingViews) {
        let mut pending = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        for (item, seen) in batch.items {
            let room = MAX_PENDING_VIEWERS.saturating_sub(pending.viewers);
            let entry = pending.items.entry(item).or_default();
            entry.count += seen.count;
            let kept = seen.viewers.len().min(room);
            entry.viewers.extend(seen.viewers.into_iter().take(kept));
            pending.viewers += kept;
        }
    }
}

/// Views taken out of the batch for a write, put back when dropped unless written.
struct Unwritten<'a> {
    into: &'a ViewBatch,
    views: Option<PendingViews>,
}

impl Drop for Unwritten<'_> {
    fn drop(&mut self) {
        if let Some(views) = self.views.take() {
            self.into.merge_back(views);
        }
    }
}

/// The daemon that writes each process's batched views every
/// [`VIEW_FLUSH_EVERY`]. It runs in every process that serves pages (not only in
/// workers): the views it writes are the ones this process counted.
///
/// What a crash loses: the views counted since the last flush (a tenth of a second
/// of this process's traffic), in the ranking and the viewer counts; nothing else
/// is batched. A graceful stop loses nothing: the loop's last step flushes after
/// the server has answered its last request. A flush that fails keeps its views for
/// the next one (up to a bound on the viewers held, so an outage cannot grow memory
/// without end).
///
/// The loop's steps run as tasks of their own: the daemon loop drops a step in
/// flight at shutdown, and a write dropped after Redis ran it but before its
/// answer came back would put its views back to be written (and counted) twice.
/// So the step's task goes on, and the last step waits for it before writing the
/// rest.
pub struct ViewFlusher {
    sessions: Sessions,
    in_flight: Option<tokio::task::JoinHandle<Result<u64, CacheError>>>,
}

impl ViewFlusher {
    /// A flusher of `sessions`' batch.
    pub fn new(sessions: Sessions) -> Self {
        Self {
            sessions,
            in_flight: None,
        }
    }

    /// Writes what is pending; the single step.
    pub async fn step(&self) -> Result<u64, CacheError> {
        self.sessions.flush_views().await
    }

    /// Waits for the step a dropped tick left running, if any.
    async fn settle(&mut self) -> Result<u64, CacheError> {
        let Some(task) = self.in_flight.as_mut() else {
            return Ok(0);
        };
        let done = task.await;
        self.in_flight = None;
        done.unwrap_or_else(|panicked| std::panic::resume_unwind(panicked.into_panic()))
    }
}

impl Daemon for ViewFlusher {
    const NAME: &'static str = "view-flusher";
    type Error = CacheError;

    async fn tick(&mut self) -> Result<Duration, CacheError> {
        if self.in_flight.is_none() {
            let sessions = self.sessions.clone();
            self.in_flight = Some(tokio::spawn(async move { sessions.flush_views().await }));
        }
        self.settle().await?;
        Ok(VIEW_FLUSH_EVERY)
    }

    async fn finish(&mut self) {
        if let Err(error) = self.settle().await {
            tracing::warn!(%error, "the step in flight at shutdown failed");
        }
        match self.step().await {
            Ok(0) => {}
            Ok(n) => tracing::info!(views = n, "wrote the last batch of views"),
            Err(error) => tracing::warn!(%error, "could not write the last batch of views"),
        }
    }
}
