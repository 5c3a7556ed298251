//! View accounting: the one touch every request makes of its session, and the item
//! views it counts, from the touch to `viewed:`.
//!
//! The lifecycle, all of it here:
//! 1. [`Sessions::touch`] with a [`Touch`] saying what the request views. One round
//!    trip: the `touch.lua` script refreshes `recent:` (starting the session if the
//!    token is new), keeps `guests:` for a guest, puts an item in the session's
//!    history and answers who is logged in. A visitor with no session yet is not
//!    touched at all: its views are counted by [`Sessions::count_view`].
//! 2. An item page's touch may be sent *ahead* of the page's answer
//!    ([`Touch::view_ahead`]), so it travels with the page's own lookup; then
//!    [`Sessions::settle_view`] counts the view once the page answered 200, or takes
//!    the item out of the history again.
//! 3. A counted view goes into this process's batch (no Redis call per view),
//!    and [`ViewFlusher`] writes the batch every [`VIEW_FLUSH_EVERY`]: one `ZINCRBY`
//!    on `viewed:` and one `PFADD` on `viewers:<item>:<window>` per item, which also
//!    keeps `viewed:`, one key on one node of a cluster, from taking a command per
//!    page view.

use std::collections::HashMap;

use futures::{FutureExt, StreamExt};
use std::sync::Mutex;
use std::time::Duration;

use super::{SessionToken, Sessions};
use crate::RedisConn;
use crate::daemon::Daemon;
use crate::domain::{ItemId, UserId};
use crate::keys::Keys;
use crate::{CacheError, scripts};

/// What one request does to its session: the argument of [`Sessions::touch`].
///
/// `Touch::request()`, then what the request adds: `.view(item)`,
/// `.view_ahead(item)` or `.as_user(user)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use]
pub struct Touch {
    user: Option<UserId>,
    view: Option<(ItemId, Count)>,
}

/// When a view is counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Count {
    /// With the touch: the page is known to exist.
    Now,
    /// By [`Sessions::settle_view`], once the page answered.
    OnSettle,
}

impl Touch {
    /// A request of the session: last seen now. A token the shop does not know
    /// starts a session (the book's `update_token`): the shop hands out tokens
    /// without writing anything, so a session begins when its cookie first comes
    /// back (see [`crate::session`]).
    pub fn request() -> Self {
        Self {
            user: None,
            view: None,
        }
    }

    /// Records the session as logged in as `user` (the book's `update_token` with a
    /// user; the shop itself logs in through [`Sessions::login`]).
    pub fn as_user(self, user: UserId) -> Self {
        Self {
            user: Some(user),
            ..self
        }
    }

    /// A view of `item` whose page is known to exist: in the session's history and
    /// counted.
    pub fn view(self, item: ItemId) -> Self {
        Self {
            view: Some((item, Count::Now)),
            ..self
        }
    }

    /// A view of `item` sent before its page answered: put in the history now,
    /// counted (or taken back) by [`Sessions::settle_view`].
    pub fn view_ahead(self, item: ItemId) -> Self {
        Self {
            view: Some((item, Count::OnSettle)),
            ..self
        }
    }
}

/// What [`Sessions::touch`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Touched {
    /// A live session, logged in as this user (or a guest).
    Known(Option<UserId>),
    /// A token that was no session: this touch started one (as this user, or a
    /// guest).
    Started(Option<UserId>),
    /// A session past its lifetime ([`super::Lifetimes`]): the touch removed it
    /// with everything it owned, as logout does, and recorded nothing. The token is
    /// worth nothing now; the caller hands the visitor a new one.
    Expired,
}

impl Touched {
    /// The user the session is logged in as, if any.
    pub fn user(self) -> Option<UserId> {
        match self {
            Touched::Known(user) | Touched::Started(user) => user,
            Touched::Expired => None,
        }
    }
}

impl Sessions {
    /// Records one request of a session in one round trip (see [`Touch`]): last seen
    /// now, the user when given, and an item view (kept in the session's
    /// [`HISTORY_LEN`](super::HISTORY_LEN) most recent, and counted in this process's
    /// batch for `viewed:`). Returns the user the token is logged in as, so no second
    /// call to [`Sessions::check_token`] is needed.
    pub async fn touch(&self, token: &SessionToken, touch: Touch) -> Result<Touched, CacheError> {
        let item = touch.view.map(|(item, _)| item);
        let items: &[ItemId] = match &item {
            Some(item) => std::slice::from_ref(item),
            None => &[],
        };
        let answers = self
            .touch_shard(
                self.keys.shard_of(token),
                &[HeldTouch {
                    token,
                    user: touch.user,
                    items,
                }],
            )
            .await?;
        let Some((started, user)) = answers.into_iter().next() else {
            return Err(CacheError::Corrupt { what: "recent:" });
        };
        if started == 2 {
            // Removed by the script: out of its user's list of sessions too.
            if let Some(user) = user.and_then(|raw| raw.parse::<UserId>().ok()) {
                self.unindex(&[(token.clone(), user)]).await?;
            }
            return Ok(Touched::Expired);
        }
        if let Some((item, Count::Now)) = touch.view {
            self.batches.views.add(item, token);
        }
        let user = user
            .map(|raw| {
                raw.parse()
                    .map_err(|_| CacheError::Corrupt { what: "login:" })
            })
            .transpose()?;
        Ok(if started == 1 {
            Touched::Started(user)
        } else {
            Touched::Known(user)
        })
    }

    /// One call of the touch script for sessions of one shard (see `touch.lua`):
    /// each session's (started, user) in order.
    async fn touch_shard(
        &self,
        shard: crate::keys::Shard,
        touches: &[HeldTouch<'_>],
    ) -> Result<Vec<(i64, Option<String>)>, CacheError> {
        let mut call = scripts::TOUCH.prepare_invoke();
        call.key(self.keys.recent_in(shard))
            .key(self.keys.login_in(shard))
            .key(self.keys.guests_in(shard))
            .key(self.keys.logins_in(shard));
        let lifetimes = &self.lifetimes;
        call.arg(super::HISTORY_LEN)
            .arg(lifetimes.idle().as_secs())
            .arg(lifetimes.guest_idle().as_secs())
            .arg(lifetimes.absolute().as_secs());
        for touch in touches {
            call.key(self.keys.viewed_by_member(shard, touch.token.expose()))
                .key(self.keys.cart_member(shard, touch.token.expose()))
                .arg(touch.token.expose())
                .arg(
                    touch
                        .user
                        .map(|user| user.get().to_string())
                        .unwrap_or_default(),
                )
                .arg(touch.items.len())
                .arg(
                    touch
                        .items
                        .iter()
                        .map(|item| item.get())
                        .collect::<Vec<_>>(),
                );
        }
        let answers: Vec<(i64, Option<String>)> = call.invoke_async(&mut self.conn.clone()).await?;
        if answers.len() != touches.len() {
            return Err(CacheError::Corrupt { what: "recent:" });
        }
        Ok(answers)
    }

    /// Holds back the touch of an item page's request (write-behind): the page
    /// needs nobody's identity, so the request waits for no Redis round trip, and
    /// the next flush ([`Sessions::flush_views`], every [`VIEW_FLUSH_EVERY`] and at
    /// shutdown) touches the session as [`Sessions::touch`] would have, with its
    /// views in order, many sessions per script call. A `view` is of a page that
    /// answered 200; it is counted now (this process's batch of views).
    ///
    /// `false` (nothing held) when the process already holds
    /// [`MAX_HELD_TOUCHES`] sessions' touches (Redis slow or away): the caller
    /// touches now instead, so memory stays bounded and nothing is dropped.
    ///
    /// What it changes: a session past its lifetime is removed by the flush, not
    /// refused on this request (its next request that waits for its session, such
    /// as the page's own `/api/me`, starts afresh); a crash loses the touches of the
    /// last flush interval (last-seen times and history entries of that tenth of a
    /// second, never a login or a cart).
    pub fn touch_later(&self, token: &SessionToken, view: Option<ItemId>) -> bool {
        if !self.batches.held.hold(token, view) {
            return false;
        }
        if let Some(item) = view {
            self.batches.views.add(item, token);
        }
        true
    }

    /// Writes the touches held back since the last flush; returns how many
    /// sessions it touched. A failed write keeps them for the next flush.
    pub async fn flush_touches(&self) -> Result<u64, CacheError> {
        let taken = self.batches.held.take();
        if taken.is_empty() {
            return Ok(0);
        }
        let mut unwritten = UnwrittenTouches {
            into: &self.batches.held,
            touches: Some(taken),
        };
        let held = unwritten.touches.as_ref().expect("just set");
        let mut by_shard: HashMap<crate::keys::Shard, Vec<HeldTouch<'_>>> = HashMap::new();
        for (token, items) in held {
            by_shard
                .entry(self.keys.shard_of(token))
                .or_default()
                .push(HeldTouch {
                    token,
                    user: None,
                    items,
                });
        }
        let work: Vec<(crate::keys::Shard, &[HeldTouch<'_>])> = by_shard
            .iter()
            .flat_map(|(shard, touches)| touches.chunks(TOUCH_CHUNK).map(|chunk| (*shard, chunk)))
            .collect();
        let calls: Vec<_> = work
            .into_iter()
            .map(|(shard, chunk)| {
                async move { (chunk, self.touch_shard(shard, chunk).await) }.boxed()
            })
            .collect();
        let mut expired = Vec::new();
        let mut failed: Option<CacheError> = None;
        let mut touched = 0;
        // A few calls in flight, not all at once: a flush is tens of script calls,
        // and sent together they would hold every other command of this process
        // (a page lookup, a cart) behind all of them.
        let answers: Vec<_> = futures::stream::iter(calls)
            .buffer_unordered(FLUSH_IN_FLIGHT)
            .collect()
            .await;
        for (chunk, answer) in answers {
            match answer {
                Ok(answers) => {
                    touched += chunk.len() as u64;
                    for (touch, (started, user)) in chunk.iter().zip(answers) {
                        if started == 2
                            && let Some(user) = user.and_then(|raw| raw.parse::<UserId>().ok())
                        {
                            expired.push((touch.token.clone(), user));
                        }
                    }
                }
                Err(error) => failed = Some(error),
            }
        }
        match failed {
            // Kept whole for the next flush: a chunk that was written is touched
            // twice then, which only moves its last-seen time (and re-adds the
            // same views to its history, where they already are).
            Some(error) => Err(error),
            None => {
                unwritten.touches = None;
                self.unindex(&expired).await?;
                Ok(touched)
            }
        }
    }

    /// The sessions whose touches are held back, for metrics.
    pub fn pending_touches(&self) -> u64 {
        self.batches.held.len() as u64
    }

    /// Counts a view of `item` by a visitor with no session (one who has not sent
    /// its cookie back yet, or never will: a crawler). It counts in the ranking
    /// (`viewed:`, so the page cache's gate follows what crawlers fetch too) but not
    /// among the item's distinct viewers, and writes nothing now: it goes into this
    /// process's batch.
    pub fn count_view(&self, item: ItemId) {
        self.batches.views.add_count(item);
    }

    /// Ends a [`Touch::view_ahead`] once the page answered: a `found` page's view is
    /// counted (in this process's batch, no Redis call); otherwise the item leaves
    /// the session's history again (one `ZREM`), so a made-up id never stays there
    /// nor reaches the ranking. (If that touch trimmed the session's oldest view to
    /// make room, that view stays gone.)
    pub async fn settle_view(
        &self,
        token: &SessionToken,
        item: ItemId,
        found: bool,
    ) -> Result<(), CacheError> {
        if found {
            self.batches.views.add(item, token);
            return Ok(());
        }
        redis::cmd("ZREM")
            .arg(self.keys.viewed_by(token))
            .arg(item.get())
            .exec_async(&mut self.conn.clone())
            .await?;
        Ok(())
    }

    /// Writes the item views counted since the last flush: each item's count into
    /// `viewed:` and its viewers into `viewers:<item>:<window>`. Returns how many
    /// views it wrote. Called every [`VIEW_FLUSH_EVERY`] by [`ViewFlusher`] and once
    /// more at shutdown.
    pub async fn flush_views(&self) -> Result<u64, CacheError> {
        // The held-back touches first (their views are already in the batch), then
        // the views; a failure of either leaves its part for the next flush.
        let touched = self.flush_touches().await;
        let views = self.batches.views.flush(&self.conn, &self.keys).await;
        touched?;
        views
    }

    /// The views counted but not yet written, for metrics.
    pub fn pending_views(&self) -> u64 {
        self.batches.views.pending()
    }
}

/// What a process counts and holds back between flushes.
#[derive(Debug, Default)]
pub(super) struct Batches {
    pub(super) views: ViewBatch,
    pub(super) held: HeldTouches,
}

/// Items per script call of a view flush (one node): a few hundred microseconds
/// of Redis time per call.
const VIEW_CHUNK: usize = 500;
/// Viewers per script call of a view flush, so a batch that grew while Redis was
/// away is written in many short calls, not one long one.
const VIEWERS_PER_CALL: usize = 5_000;

/// The most sessions whose touches one process holds back
/// ([`Sessions::touch_later`]); past it requests touch at once. A hundred
/// thousand a tenth of a second is far past any one process's traffic: it is
/// reached only while Redis does not take the writes.
pub const MAX_HELD_TOUCHES: usize = 100_000;

/// Sessions per script call of a flush: about ten microseconds of Redis time
/// each, so a call holds Redis for about half a millisecond at most.
const TOUCH_CHUNK: usize = 50;

/// Script calls of one flush in flight at once: a command of a request waits
/// behind at most this many.
const FLUSH_IN_FLIGHT: usize = 4;

/// One session's part of a touch call.
struct HeldTouch<'a> {
    token: &'a SessionToken,
    user: Option<UserId>,
    items: &'a [ItemId],
}

/// The touches a process holds back: each session's item views since the last
/// flush, in order (the history's length at most).
#[derive(Debug, Default)]
pub(super) struct HeldTouches {
    by_token: Mutex<HashMap<SessionToken, Vec<ItemId>>>,
}

impl HeldTouches {
    fn hold(&self, token: &SessionToken, view: Option<ItemId>) -> bool {
        let mut held = self.by_token.lock().unwrap_or_else(|e| e.into_inner());
        if !held.contains_key(token) && held.len() >= MAX_HELD_TOUCHES {
            return false;
        }
        let items = held.entry(token.clone()).or_default();
        if let Some(item) = view {
            if items.len() >= super::HISTORY_LEN {
                items.remove(0);
            }
            items.push(item);
        }
        true
    }

    fn take(&self) -> HashMap<SessionToken, Vec<ItemId>> {
        std::mem::take(&mut *self.by_token.lock().unwrap_or_else(|e| e.into_inner()))
    }

    fn len(&self) -> usize {
        self.by_token
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .len()
    }

    /// Puts back touches that were not written, before any held since (they are
    /// older), within the bound.
    fn merge_back(&self, touches: HashMap<SessionToken, Vec<ItemId>>) {
        let mut held = self.by_token.lock().unwrap_or_else(|e| e.into_inner());
        for (token, mut items) in touches {
            if let Some(newer) = held.get_mut(&token) {
                items.append(newer);
                let over = items.len().saturating_sub(super::HISTORY_LEN);
                items.drain(..over);
                *newer = items;
            } else if held.len() < MAX_HELD_TOUCHES {
                held.insert(token, items);
            }
        }
    }
}

/// Touches taken out for a write, put back when dropped unless written.
struct UnwrittenTouches<'a> {
    into: &'a HeldTouches,
    touches: Option<HashMap<SessionToken, Vec<ItemId>>>,
}

impl Drop for UnwrittenTouches<'_> {
    fn drop(&mut self) {
        if let Some(touches) = self.touches.take() {
            self.into.merge_back(touches);
        }
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
pub(super) struct ViewBatch {
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

    fn add_count(&self, item: ItemId) {
        let mut pending = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        pending.items.entry(item).or_default().count += 1;
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
        let views: u64 = batch.items.values().map(|seen| seen.count).sum();
        // The ranking: one key, so its counts go in few calls.
        let counts: Vec<(ItemId, u64)> = batch
            .items
            .iter()
            .map(|(item, seen)| (*item, seen.count))
            .collect();
        let ranking = counts.chunks(VIEW_CHUNK).map(|chunk| {
            let mut call = scripts::COUNT_VIEWS.prepare_invoke();
            call.key(keys.item_views());
            for (item, count) in chunk {
                call.arg(item.get()).arg(*count);
            }
            let mut conn = conn.clone();
            async move { call.invoke_async::<i64>(&mut conn).await }.boxed()
        });
        // The viewers: one key per item, so one call per item on a cluster (each
        // its own slot) and a chunk of items per call on one node.
        let seen: Vec<(ItemId, &[SessionToken])> = batch
            .items
            .iter()
            .filter(|(_, seen)| !seen.viewers.is_empty())
            .map(|(item, seen)| (*item, seen.viewers.as_slice()))
            .collect();
        let one_slot = matches!(keys.layout(), crate::keys::Layout::Book);
        let mut groups: Vec<&[(ItemId, &[SessionToken])]> = Vec::new();
        let (mut start, mut tokens) = (0, 0);
        for (i, (_, viewers)) in seen.iter().enumerate() {
            if i > start && (!one_slot || i - start >= VIEW_CHUNK || tokens >= VIEWERS_PER_CALL) {
                groups.push(&seen[start..i]);
                (start, tokens) = (i, 0);
            }
            tokens += viewers.len();
        }
        if start < seen.len() {
            groups.push(&seen[start..]);
        }
        let viewers = groups.into_iter().map(|chunk| {
            let mut call = scripts::ADD_VIEWERS.prepare_invoke();
            call.arg(ttl);
            for (item, tokens) in chunk {
                call.key(keys.viewers(*item, window))
                    .arg(tokens.len())
                    .arg(tokens.iter().map(SessionToken::expose).collect::<Vec<_>>());
            }
            let mut conn = conn.clone();
            async move { call.invoke_async::<i64>(&mut conn).await }.boxed()
        });
        // On an error the guard keeps the views for the next flush. (Part of them
        // may have been written before it failed; counting those again is the
        // lesser error.)
        // A few calls in flight at a time (see `flush_touches`); on a cluster, where
        // each item's viewers are a call of their own to its node, more.
        let in_flight = if one_slot {
            FLUSH_IN_FLIGHT
        } else {
            4 * FLUSH_IN_FLIGHT
        };
        let calls: Vec<_> = ranking.chain(viewers).collect();
        let written: Vec<Result<i64, redis::RedisError>> = futures::stream::iter(calls)
            .buffer_unordered(in_flight)
            .collect()
            .await;
        for written in written {
            written?;
        }
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
