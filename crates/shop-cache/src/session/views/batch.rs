//! What a process holds between flushes: the item views it counted and the touches
//! it held back, and the daemon that writes them ([`ViewFlusher`]).

use super::*;

/// What a process counts and holds back between flushes.
#[derive(Debug, Default)]
pub(in crate::session) struct Batches {
    pub(in crate::session) views: ViewBatch,
    pub(in crate::session) held: HeldTouches,
    pub(in crate::session) logged_in: PeekedLogins,
}

/// Which user each session [`Sessions::peek`] found logged in was logged in as:
/// its next peek reads that account's cart in the same round trip (on one node),
/// and uses it only if the session is still that user's. A guess, never trusted:
/// at most [`PeekedLogins::MAX`] sessions, each for [`PeekedLogins::IDLE`] after
/// its last peek.
pub(in crate::session) struct PeekedLogins(moka::sync::Cache<SessionToken, UserId>);

impl PeekedLogins {
    /// The most sessions remembered (about 15 MB at most).
    pub(in crate::session) const MAX: u64 = 100_000;
    /// How long a session not peeked again is remembered.
    pub(in crate::session) const IDLE: std::time::Duration = std::time::Duration::from_secs(600);

    pub(in crate::session) fn get(&self, token: &SessionToken) -> Option<UserId> {
        self.0.get(token)
    }

    /// Remembers what a peek found: `user`, or no login.
    pub(in crate::session) fn found(
        &self,
        token: &SessionToken,
        guess: Option<UserId>,
        user: Option<UserId>,
    ) {
        match user {
            Some(user) if guess != Some(user) => self.0.insert(token.clone(), user),
            None if guess.is_some() => self.0.invalidate(token),
            _ => {}
        }
    }
}

impl Default for PeekedLogins {
    fn default() -> Self {
        Self(
            moka::sync::Cache::builder()
                .max_capacity(Self::MAX)
                .time_to_idle(Self::IDLE)
                .build(),
        )
    }
}

impl std::fmt::Debug for PeekedLogins {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PeekedLogins")
            .field("sessions", &self.0.entry_count())
            .finish()
    }
}

/// Items per script call of a view flush (one node): a few hundred microseconds
/// of Redis time per call.
pub(super) const VIEW_CHUNK: usize = 500;
/// Viewers per script call of a view flush, so a batch that grew while Redis was
/// away is written in many short calls, not one long one.
pub(super) const VIEWERS_PER_CALL: usize = 5_000;

/// The most sessions whose touches one process holds back
/// ([`Sessions::touch_later`]); past it requests touch at once. A hundred
/// thousand a tenth of a second is far past any one process's traffic: it is
/// reached only while Redis does not take the writes.
pub const MAX_HELD_TOUCHES: usize = 100_000;

/// Sessions per script call of a flush: about ten microseconds of Redis time
/// each, so a call holds Redis for about half a millisecond at most.
pub(super) const TOUCH_CHUNK: usize = 50;

/// Script calls of one flush in flight at once: a command of a request waits
/// behind at most this many.
pub(super) const FLUSH_IN_FLIGHT: usize = 4;

/// One session's part of a touch call.
pub(super) struct HeldTouch<'a> {
    pub(super) token: &'a SessionToken,
    pub(super) user: Option<UserId>,
    pub(super) items: &'a [ItemId],
}

/// The touches a process holds back: each session's item views since the last
/// flush, in order (the history's length at most).
#[derive(Debug, Default)]
pub(in crate::session) struct HeldTouches {
    pub(super) by_token: Mutex<HashMap<SessionToken, Vec<ItemId>>>,
}

impl HeldTouches {
    pub(super) fn hold(&self, token: &SessionToken, view: Option<ItemId>) -> bool {
        let mut held = self.by_token.lock().unwrap_or_else(|e| e.into_inner());
        if !held.contains_key(token) && held.len() >= MAX_HELD_TOUCHES {
            return false;
        }
        let items = held.entry(token.clone()).or_default();
        if let Some(item) = view {
            if items.len() >= crate::session::HISTORY_LEN {
                items.remove(0);
            }
            items.push(item);
        }
        true
    }

    pub(super) fn take(&self) -> HashMap<SessionToken, Vec<ItemId>> {
        std::mem::take(&mut *self.by_token.lock().unwrap_or_else(|e| e.into_inner()))
    }

    pub(super) fn len(&self) -> usize {
        self.by_token
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .len()
    }

    /// Puts back touches that were not written, before any held since (they are
    /// older), within the bound.
    pub(super) fn merge_back(&self, touches: HashMap<SessionToken, Vec<ItemId>>) {
        let mut held = self.by_token.lock().unwrap_or_else(|e| e.into_inner());
        for (token, mut items) in touches {
            if let Some(newer) = held.get_mut(&token) {
                items.append(newer);
                let over = items.len().saturating_sub(crate::session::HISTORY_LEN);
                items.drain(..over);
                *newer = items;
            } else if held.len() < MAX_HELD_TOUCHES {
                held.insert(token, items);
            }
        }
    }
}

/// Touches taken out for a write, put back when dropped unless written.
pub(super) struct UnwrittenTouches<'a> {
    pub(super) into: &'a HeldTouches,
    pub(super) touches: Option<HashMap<SessionToken, Vec<ItemId>>>,
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
pub(super) const MAX_PENDING_VIEWERS: usize = 200_000;

/// The views a process counted and has not yet written (cluster layout).
///
/// What a crash loses: the views of the last [`VIEW_FLUSH_EVERY`] (a tenth of a
/// second of traffic of this one process), in the ranking and the viewer counts.
/// Nothing else: the session, its history and the page itself were written by the
/// touch script. A graceful stop flushes ([`ViewFlusher`] runs one last step), so
/// it loses nothing; a flush that fails keeps its views for the next one.
///
/// Written at most once: each call that adds to the ranking carries this
/// process's number for it, and the script skips a number it has applied
/// ([`RankingCalls`]). A call whose answer was lost (a time-out while the node
/// stalled, a step dropped at shutdown) may still run later; it is sent again with
/// the same number, never merged into newer counts, so it counts once whichever
/// copy runs first.
#[derive(Debug, Default)]
pub(in crate::session) struct ViewBatch {
    pub(super) pending: Mutex<PendingViews>,
    pub(super) ranking: tokio::sync::Mutex<RankingCalls>,
}

/// How long Redis remembers the last ranking call a process applied: far longer
/// than any outage a call in doubt can be retried after (a restarted process is a
/// new writer, so the keys are one per process started in that time).
pub(super) const RANKING_MARK_TTL: Duration = Duration::from_secs(86_400);

/// This process's ranking calls: who writes them, the last number given, and the
/// call whose answer was lost, if any (sent again, with its number, before any
/// newer one). Calls go one at a time, in order, so a number at most the last
/// applied is one applied already.
#[derive(Debug)]
pub(in crate::session) struct RankingCalls {
    writer: String,
    last: u64,
    in_doubt: Option<RankingCall>,
}

impl Default for RankingCalls {
    fn default() -> Self {
        Self {
            writer: SessionToken::generate().expose().to_owned(),
            last: 0,
            in_doubt: None,
        }
    }
}

/// Counts for the ranking, and their number.
#[derive(Debug, Clone)]
pub(super) struct RankingCall {
    number: u64,
    counts: Vec<(ItemId, u64)>,
}

impl RankingCalls {
    /// Sends the call in doubt until Redis has answered it.
    async fn send(&mut self, conn: &RedisConn, keys: &Keys) -> Result<(), CacheError> {
        let Some(call) = &self.in_doubt else {
            return Ok(());
        };
        let mut script = scripts::COUNT_VIEWS.prepare_invoke();
        script
            .key(keys.item_views())
            .key(keys.ranking_writer(&self.writer))
            .key(keys.unranked())
            .arg(call.number)
            .arg(RANKING_MARK_TTL.as_secs());
        for (item, count) in &call.counts {
            script.arg(item.get()).arg(*count);
        }
        script.invoke_async::<i64>(&mut conn.clone()).await?;
        self.in_doubt = None;
        Ok(())
    }

    /// Gives `counts` the next number and sends them (kept in doubt until
    /// answered).
    async fn add(
        &mut self,
        counts: Vec<(ItemId, u64)>,
        conn: &RedisConn,
        keys: &Keys,
    ) -> Result<(), CacheError> {
        debug_assert!(self.in_doubt.is_none());
        self.last += 1;
        self.in_doubt = Some(RankingCall {
            number: self.last,
            counts,
        });
        self.send(conn, keys).await
    }
}

#[derive(Debug, Default)]
pub(super) struct PendingViews {
    pub(super) items: HashMap<ItemId, ItemViews>,
    pub(super) viewers: usize,
}

#[derive(Debug, Default)]
pub(super) struct ItemViews {
    pub(super) count: u64,
    pub(super) viewers: Vec<SessionToken>,
}

impl ViewBatch {
    pub(super) fn add(&self, item: ItemId, token: &SessionToken) {
        let mut pending = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        let full = pending.viewers >= MAX_PENDING_VIEWERS;
        let entry = pending.items.entry(item).or_default();
        entry.count += 1;
        if !full {
            entry.viewers.push(token.clone());
            pending.viewers += 1;
        }
    }

    pub(super) fn add_count(&self, item: ItemId) {
        let mut pending = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        pending.items.entry(item).or_default().count += 1;
    }

    pub(super) fn pending(&self) -> u64 {
        let pending = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        pending.items.values().map(|v| v.count).sum()
    }

    pub(super) async fn flush(&self, conn: &RedisConn, keys: &Keys) -> Result<u64, CacheError> {
        // One flush's ranking calls at a time, in order.
        let mut ranking = self.ranking.lock().await;
        let mut taken =
            std::mem::take(&mut *self.pending.lock().unwrap_or_else(|e| e.into_inner()));
        if taken.items.is_empty() && ranking.in_doubt.is_none() {
            return Ok(0);
        }
        // The counts leave the batch: sent below, or put back unsent.
        let counts: Vec<(ItemId, u64)> = taken
            .items
            .iter_mut()
            .filter(|(_, seen)| seen.count > 0)
            .map(|(item, seen)| (*item, std::mem::take(&mut seen.count)))
            .collect();
        let views: u64 = counts.iter().map(|(_, count)| count).sum();
        // Put back unless written: on an error, and also when this future is dropped
        // mid-write (the daemon loop drops a step in flight at shutdown; the views
        // were then lost before its last step could write them).
        let mut unwritten = Unwritten {
            into: self,
            views: Some(taken),
            counts,
        };
        // The ranking: one key, so its counts go in few calls, one at a time; the
        // call in doubt first.
        ranking.send(conn, keys).await?;
        while !unwritten.counts.is_empty() {
            let rest = unwritten
                .counts
                .split_off(unwritten.counts.len().min(VIEW_CHUNK));
            let chunk = std::mem::replace(&mut unwritten.counts, rest);
            ranking.add(chunk, conn, keys).await?;
        }
        drop(ranking);
        let batch = unwritten.views.as_ref().expect("just set");
        let window = crate::insights::current_window();
        let ttl = crate::insights::WINDOW_TTL.as_secs();
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
        // On an error the guard keeps the viewers for the next flush (adding a
        // viewer again changes nothing).
        // A few calls in flight at a time (see `flush_touches`); on a cluster, where
        // each item's viewers are a call of their own to its node, more.
        let in_flight = if one_slot {
            FLUSH_IN_FLIGHT
        } else {
            4 * FLUSH_IN_FLIGHT
        };
        let calls: Vec<_> = viewers.collect();
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

    pub(super) fn merge_back(&self, batch: PendingViews, counts: Vec<(ItemId, u64)>) {
        let mut pending = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        for (item, count) in counts {
            pending.items.entry(item).or_default().count += count;
        }
        for (item, seen) in batch.items {
            if seen.count == 0 && seen.viewers.is_empty() {
                continue;
            }
            let room = MAX_PENDING_VIEWERS.saturating_sub(pending.viewers);
            let entry = pending.items.entry(item).or_default();
            entry.count += seen.count;
            let kept = seen.viewers.len().min(room);
            entry.viewers.extend(seen.viewers.into_iter().take(kept));
            pending.viewers += kept;
        }
    }
}

/// Views taken out of the batch for a write, put back when dropped unless written:
/// the viewers, and the ranking's counts not yet given to a call.
pub(super) struct Unwritten<'a> {
    pub(super) into: &'a ViewBatch,
    pub(super) views: Option<PendingViews>,
    pub(super) counts: Vec<(ItemId, u64)>,
}

impl Drop for Unwritten<'_> {
    fn drop(&mut self) {
        let counts = std::mem::take(&mut self.counts);
        if let Some(views) = self.views.take() {
            self.into.merge_back(views, counts);
        } else if !counts.is_empty() {
            self.into.merge_back(PendingViews::default(), counts);
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
    pub(super) sessions: Sessions,
    pub(super) in_flight: Option<tokio::task::JoinHandle<Result<u64, CacheError>>>,
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
    pub(super) async fn settle(&mut self) -> Result<u64, CacheError> {
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
