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
//!    [`Sessions::settle_view`] counts the view once the page was shown, or takes
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

mod batch;

pub(in crate::session) use batch::Batches;
use batch::*;
pub use batch::{MAX_HELD_TOUCHES, VIEW_FLUSH_EVERY, ViewFlusher};

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

/// What a session holds, read by [`Sessions::touch_and_read`] in its touch's round
/// trip: what `/api/me` shows besides the user.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Holdings {
    /// The cart's lines, by item.
    pub cart: Vec<(ItemId, crate::cart::Quantity)>,
    /// The history, newest first.
    pub viewed: Vec<ItemId>,
    /// The cart of the account the session is logged in as, when
    /// [`Sessions::peek`] read it in the same round trip (on one node, for a
    /// session it had found logged in before): a logged-in shopper's cart is the
    /// account's ([`crate::cart::CartOf::Account`]). `None`: not read here.
    pub account_cart: Option<(UserId, Vec<(ItemId, crate::cart::Quantity)>)>,
}

/// How near the end of one of its lifetimes a session is touched at once by
/// [`Sessions::peek`]'s callers (and so refused past it exactly), not held back:
/// more than web servers' clocks differ, far less than any lifetime.
pub const LIFETIME_MARGIN: std::time::Duration = std::time::Duration::from_secs(120);

/// The user and the holdings of a session, as Redis answers them.
fn read_session(
    user: Option<String>,
    cart: Vec<(String, String)>,
    viewed: Vec<String>,
) -> Result<(Option<UserId>, Holdings), CacheError> {
    let user = user
        .map(|raw| {
            raw.parse()
                .map_err(|_| CacheError::Corrupt { what: "login:" })
        })
        .transpose()?;
    let holdings = Holdings {
        cart: crate::cart::lines(cart)?,
        viewed: super::history(&viewed)?,
        account_cart: None,
    };
    Ok((user, holdings))
}

/// One session's answer of the touch script: (started, user, cart as HGETALL
/// answers it, history newest first; both empty unless asked for).
type TouchAnswer = (i64, Option<String>, Vec<(String, String)>, Vec<String>);

impl Sessions {
    /// Records one request of a session in one round trip (see [`Touch`]): last seen
    /// now, the user when given, and an item view (kept in the session's
    /// [`HISTORY_LEN`](super::HISTORY_LEN) most recent, and counted in this process's
    /// batch for `viewed:`). Returns the user the token is logged in as, so no second
    /// call to [`Sessions::check_token`] is needed.
    pub async fn touch(&self, token: &SessionToken, touch: Touch) -> Result<Touched, CacheError> {
        Ok(self.touch_one(token, touch, false).await?.0)
    }

    /// [`Sessions::touch`], reading in the same round trip what the session holds
    /// after it: its cart and history (empty for a session that expired).
    pub async fn touch_and_read(
        &self,
        token: &SessionToken,
        touch: Touch,
    ) -> Result<(Touched, Holdings), CacheError> {
        self.touch_one(token, touch, true).await
    }

    /// Who a session is and what it holds, read without touching it (plain
    /// reads, no script): for a request that holds its touch back
    /// ([`Sessions::touch_later`]) yet must know the session now, as `/api/me`
    /// does. `None` when the session must be touched now instead
    /// ([`Sessions::touch_and_read`]): a token the shop does not know (its touch
    /// starts the session), or a session within [`LIFETIME_MARGIN`] of the end
    /// of one of its lifetimes, by this process's clock (the touch decides by
    /// Redis's, and refuses one past it).
    ///
    /// Only the `history` newest items of the history are read (all of it, at
    /// most [`HISTORY_LEN`](super::HISTORY_LEN), for `HISTORY_LEN` or more).
    ///
    /// On one node, a session this process found logged in before has its
    /// account's cart read in the same round trip ([`Holdings::account_cart`],
    /// kept only if the session is still that user's).
    pub async fn peek(
        &self,
        token: &SessionToken,
        history: usize,
    ) -> Result<Option<(Option<UserId>, Holdings)>, CacheError> {
        let shard = self.keys.shard_of(token);
        let member = token.expose();
        type Lines = Vec<(String, String)>;
        type Peeked = (Option<f64>, Option<String>, Option<f64>, Lines, Vec<String>);
        // On a cluster the account's cart is on another slot: the caller reads it.
        let one_node = !self.conn.is_cluster();
        let guess = one_node
            .then(|| self.batches.logged_in.get(token))
            .flatten();
        let mut pipe = redis::pipe();
        pipe.zscore(self.keys.recent_in(shard), member)
            .hget(self.keys.login_in(shard), member)
            .zscore(self.keys.logins_in(shard), member)
            .hgetall(self.keys.cart_member(shard, member))
            .zrevrange(
                self.keys.viewed_by_member(shard, member),
                0,
                history.clamp(1, super::HISTORY_LEN) as isize - 1,
            );
        let mut conn = self.conn.clone();
        let ((seen, user, since, cart, viewed), account): (Peeked, Option<Lines>) = match guess {
            Some(user) => {
                pipe.hgetall(self.keys.user_cart(user));
                let (seen, login, since, cart, viewed, account) =
                    pipe.query_async(&mut conn).await?;
                ((seen, login, since, cart, viewed), Some(account))
            }
            None => (pipe.query_async(&mut conn).await?, None),
        };
        let Some(seen) = seen else {
            return Ok(None);
        };
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0.0, |since_epoch| since_epoch.as_secs_f64());
        let lifetimes = &self.lifetimes;
        let idle_max = match (&user, cart.is_empty()) {
            (None, true) => lifetimes.guest_idle(),
            _ => lifetimes.idle(),
        };
        let near_end = |at: f64, max: std::time::Duration| {
            now - at + LIFETIME_MARGIN.as_secs_f64() >= max.as_secs_f64()
        };
        // A login the book's code wrote has no `logins:` entry yet: the touch
        // writes it.
        let login_unrecorded = user.is_some() && since.is_none();
        if near_end(seen, idle_max)
            || since.is_some_and(|since| near_end(since, lifetimes.absolute()))
            || login_unrecorded
        {
            return Ok(None);
        }
        let (user, mut holdings) = read_session(user, cart, viewed)?;
        holdings.viewed.truncate(history);
        if one_node {
            self.batches.logged_in.found(token, guess, user);
        }
        // A cart that does not parse is left to the caller's own read, which
        // reports it as that cart's error, not the session's.
        if let (Some(user), Some(account)) = (user.filter(|user| guess == Some(*user)), account) {
            holdings.account_cart = crate::cart::lines(account).ok().map(|lines| (user, lines));
        }
        Ok(Some((user, holdings)))
    }

    async fn touch_one(
        &self,
        token: &SessionToken,
        touch: Touch,
        read: bool,
    ) -> Result<(Touched, Holdings), CacheError> {
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
                read,
                false,
            )
            .await?;
        let Some((started, user, cart, viewed)) = answers.into_iter().next() else {
            return Err(CacheError::Corrupt { what: "recent:" });
        };
        if started == 2 {
            // Removed by the script: out of its user's list of sessions too.
            if let Some(user) = user.and_then(|raw| raw.parse::<UserId>().ok()) {
                self.unindex(&[(token.clone(), user)]).await?;
            }
            return Ok((Touched::Expired, Holdings::default()));
        }
        if let Some((item, Count::Now)) = touch.view {
            self.batches.views.add(item, token);
        }
        let (user, holdings) = read_session(user, cart, viewed)?;
        let touched = if started == 1 {
            Touched::Started(user)
        } else {
            Touched::Known(user)
        };
        Ok((touched, holdings))
    }

    /// One call of the touch script for sessions of one shard (see `touch.lua`):
    /// each session's answer in order, with what it holds when `read`.
    async fn touch_shard(
        &self,
        shard: crate::keys::Shard,
        touches: &[HeldTouch<'_>],
        read: bool,
        held: bool,
    ) -> Result<Vec<TouchAnswer>, CacheError> {
        let mut call = scripts::TOUCH.prepare_invoke();
        call.key(self.keys.recent_in(shard))
            .key(self.keys.login_in(shard))
            .key(self.keys.guests_in(shard))
            .key(self.keys.logins_in(shard))
            .key(self.keys.anonymous_in(shard))
            .key(self.keys.ended_in(shard));
        let lifetimes = &self.lifetimes;
        call.arg(super::HISTORY_LEN)
            .arg(lifetimes.idle().as_secs())
            .arg(lifetimes.guest_idle().as_secs())
            .arg(lifetimes.absolute().as_secs())
            .arg(if held { "1" } else { "" })
            .arg(super::ENDED_MAX)
            .arg(super::ENDED_FOR.as_secs());
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
                .arg(if read { "1" } else { "" })
                .arg(touch.items.len())
                .arg(
                    touch
                        .items
                        .iter()
                        .map(|item| item.get())
                        .collect::<Vec<_>>(),
                );
        }
        let answers: Vec<redis::Value> = call.invoke_async(&mut self.conn.clone()).await?;
        if answers.len() != touches.len() {
            return Err(CacheError::Corrupt { what: "recent:" });
        }
        answers
            .into_iter()
            .map(|answer| {
                redis::from_redis_value(answer).map_err(|_| CacheError::Corrupt { what: "recent:" })
            })
            .collect()
    }

    /// Holds back the touch of an item page's request (write-behind): the page
    /// needs nobody's identity, so the request waits for no Redis round trip, and
    /// the next flush ([`Sessions::flush_views`], every [`VIEW_FLUSH_EVERY`] and at
    /// shutdown) touches the session as [`Sessions::touch`] would have, with its
    /// views in order, many sessions per script call. A `view` is of a page that
    /// was shown (200, or 304 to a client holding it); it is counted now (this
    /// process's batch of views).
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
                async move { (chunk, self.touch_shard(shard, chunk, false, true).await) }.boxed()
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
                    for (touch, (started, user, _, _)) in chunk.iter().zip(answers) {
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
