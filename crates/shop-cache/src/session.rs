//! Login sessions keyed by a random token cookie: who is logged in, when each session
//! was last seen, and what it viewed (the book's `login:`, `recent:`, `viewed:<token>`),
//! plus the global view counts `viewed:` that decide what the page cache keeps, and
//! each item's distinct viewers (`viewers:<item>`, for [`crate::insights`]).
//!
//! [`Sessions::touch`], called on every request, and the item views it counts are
//! in [`views`] (one entry, its kinds in [`Touch`], the batch and its flusher); this
//! module holds the rest of a session's life: login (a token rotation), logout, the
//! user and history reads.
//!
//! Sessions start lazily (a departure from the book, whose `update_token` writes a
//! session for every request): the shop hands a new visitor a token without writing
//! anything, and the session begins when the cookie first comes back, or when the
//! visitor changes state (a cart line, a login). A crawler that never returns cookies
//! creates no key at all; its item views still count in the ranking
//! ([`Sessions::count_view`]). Without this, every cookieless request was a session in
//! `recent:`, and a crawler at full speed pushed real shoppers out under the cap.
//! A token a client returns that the shop does not know (cleaned, or made up) starts
//! a guest session too: it reaches nobody else's data (a known token is someone's
//! session only if they hold it), logging in always moves to a token the shop made,
//! and a made-up token costs a client the same as a returned one.
//!
//! Guests and shoppers. A session neither logged in nor holding a cart is a guest,
//! also listed in `guests:`: guests expire after an idle time and the cleaner removes
//! every guest before any shopper (see [`crate::session_cleaner`]), so a flood of
//! new sessions never costs a shopper their login or cart.
//!
//! The touch is one round trip: a Lua script, not a pipeline, because it decides as
//! it goes (a guest or not, trim the history or not), orders the session's views,
//! and returns the session's user, which saves a second round trip per request. A
//! view's score in `viewed:<token>` is a small sequence number, not a float time,
//! which Redis stores in a byte or two instead of a float's 17 characters; the order
//! is the same, so the book's code still reads it.
//!
//! Lifetimes ([`Lifetimes`]): a session idle longer than its kind may be (a guest a
//! day, a session with a login or a cart 30 days), or logged in longer ago than a
//! login lasts (90 days, counted from the login in `logins:`), is expired. The touch
//! refuses such a token (it removes the session, as logout does, and the web layer
//! hands out a new one) and the cleaner removes such sessions between visits
//! ([`crate::session_cleaner`]), so a stolen cookie stops working after at most the
//! lifetime, whatever the cap.
//!
//! On a cluster (the cluster layout) the script touches only the session's shard.
//! A login moves the session to a new token in the same shard, so it stays one
//! script.

use std::sync::Arc;
use std::time::Duration;

use redis::AsyncCommands;

use crate::RedisConn;
/// The token type lives with the other identifiers; re-exported where it is used.
pub use crate::domain::SessionToken;
use crate::domain::{ItemId, UserId};
use crate::keys::Keys;
use crate::{CacheError, scripts};

pub mod user_sessions;
pub mod views;

/// One page of the logged-in sessions of `shard` from `cursor` (`HSCAN` of
/// `login:`, a thousand at a time): the next cursor (0 at the end) and the
/// sessions whose token the shop can be sent (the book's own UUIDs cannot) with
/// their users. For the one-time passes over every login (`shop migrate`).
pub(crate) async fn logins_page(
    conn: &mut RedisConn,
    keys: &Keys,
    shard: crate::keys::Shard,
    cursor: u64,
) -> Result<(u64, Vec<(SessionToken, UserId)>), CacheError> {
    let (next, page): (u64, Vec<(String, String)>) = redis::cmd("HSCAN")
        .arg(keys.login_in(shard))
        .arg(cursor)
        .arg("COUNT")
        .arg(1_000)
        .query_async(conn)
        .await?;
    let page = page
        .into_iter()
        .filter_map(|(t, u)| Some((t.parse().ok()?, u.parse().ok()?)))
        .collect();
    Ok((next, page))
}

/// A session's history (`viewed:<token>`'s members, in the order given).
fn history(raw: &[String]) -> Result<Vec<ItemId>, CacheError> {
    raw.iter()
        .map(|s| {
            s.parse().map_err(|_| CacheError::Corrupt {
                what: "viewed:<token>",
            })
        })
        .collect()
}
pub use user_sessions::{DEFAULT_MAX_PER_USER, Device, UserSession, session_id};
pub use views::{Holdings, Touch, Touched, VIEW_FLUSH_EVERY, ViewFlusher};

/// How many of a session's most recent item views `viewed:<token>` keeps.
pub const HISTORY_LEN: usize = 25;

/// The login script's call that moves `old`'s session to `new` for `user`: the
/// one place its keys and arguments are listed (the benchmarks call it too).
pub fn login_move(
    keys: &Keys,
    old: &SessionToken,
    new: &SessionToken,
    user: UserId,
) -> redis::ScriptInvocation<'static> {
    let mut call = scripts::LOGIN.prepare_invoke();
    call.key(keys.recent_of(old))
        .key(keys.login_of(old))
        .key(keys.viewed_by(old))
        .key(keys.viewed_by(new))
        .key(keys.cart(old))
        .key(keys.cart(new))
        .key(keys.guests_of(old))
        .key(keys.logins_of(old))
        .key(keys.anonymous_of(old))
        .key(keys.ended_of(old))
        .arg(old.expose())
        .arg(new.expose())
        .arg(user)
        .arg(ENDED_FOR.as_secs())
        .arg(ENDED_MAX);
    call
}

/// The call of `end_session.lua` that ends `token`'s session: for `user`
/// only if it is still theirs, or whoever's it is (logout). Its answer: 1 when
/// it ended it (else 0), and the user it was logged in as.
pub(crate) fn end_call(
    keys: &Keys,
    token: &SessionToken,
    user: Option<UserId>,
) -> redis::ScriptInvocation<'static> {
    let mut call = scripts::END_SESSION.prepare_invoke();
    call.key(keys.recent_of(token))
        .key(keys.login_of(token))
        .key(keys.guests_of(token))
        .key(keys.logins_of(token))
        .key(keys.anonymous_of(token))
        .key(keys.ended_of(token))
        .key(keys.viewed_by(token))
        .key(keys.cart(token))
        .arg(token.expose())
        .arg(user.map(|user| user.get().to_string()).unwrap_or_default())
        .arg(ENDED_FOR.as_secs())
        .arg(ENDED_MAX);
    call
}

/// How long an ended session's token is kept in `ended:` ([`Keys::ended_in`]):
/// a touch held back before the end (write-behind, written within a tenth of a
/// second, or at the next flush after a failed one) and written within this is
/// refused. Each end trims the entries older than this.
pub const ENDED_FOR: Duration = Duration::from_secs(120);

/// The most entries `ended:` keeps a shard (the newest): a logout needs no
/// session, so a client posting logouts in a loop could otherwise fill it for
/// [`ENDED_FOR`]; past this, the oldest go (their held touches, if any, are
/// long written).
pub const ENDED_MAX: u64 = 10_000;

/// How long a login form's one-time key remembers the session it made.
pub const LOGIN_ONCE_TTL: std::time::Duration = std::time::Duration::from_secs(60);
/// How long a second submit of a login form waits, in steps, for the first one to
/// finish (a login is a few milliseconds; after a second it logs in on its own).
const LOGIN_ONCE_WAIT_STEP: Duration = Duration::from_millis(20);
const LOGIN_ONCE_WAIT_STEPS: u32 = 50;

/// How long a session may live, enforced by the touch ([`Sessions::touch`]) and by
/// the cleaner ([`crate::session_cleaner::SessionCleaner::with_lifetimes`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lifetimes {
    /// Most time a session with a login or a cart may go unseen.
    pub idle: Duration,
    /// Most time a session that is neither (a guest) may go unseen (never more
    /// than `idle`).
    pub guest_idle: Duration,
    /// Most time since a login: a logged-in session ends then, however active
    /// (its user logs in again). Counted from the login (`logins:`); a guest or a
    /// cart carries no one's identity, so it has the idle lifetime only.
    pub absolute: Duration,
}

/// The default [`Lifetimes::idle`]: a shopper who comes back within a month is
/// still logged in and finds their cart.
pub const DEFAULT_IDLE: Duration = Duration::from_secs(30 * 24 * 3600);
/// The default [`Lifetimes::guest_idle`]: a visitor who comes back within a day finds
/// their history; a crawler's sessions do not wait for the cap to push them out.
pub const DEFAULT_GUEST_IDLE: Duration = Duration::from_secs(24 * 3600);
/// The default [`Lifetimes::absolute`]: a stolen cookie works for at most 90 days.
pub const DEFAULT_ABSOLUTE: Duration = Duration::from_secs(90 * 24 * 3600);

impl Default for Lifetimes {
    fn default() -> Self {
        Self {
            idle: DEFAULT_IDLE,
            guest_idle: DEFAULT_GUEST_IDLE,
            absolute: DEFAULT_ABSOLUTE,
        }
    }
}

impl Lifetimes {
    /// The guest idle time as enforced: a guest is a session too, so never longer
    /// than [`Lifetimes::idle`]; at least a second each.
    pub fn guest_idle(&self) -> Duration {
        self.guest_idle.min(self.idle).max(Duration::from_secs(1))
    }

    /// The idle time of a session with a login or a cart, at least a second.
    pub fn idle(&self) -> Duration {
        self.idle.max(Duration::from_secs(1))
    }

    /// The time a login lasts, at least a second.
    pub fn absolute(&self) -> Duration {
        self.absolute.max(Duration::from_secs(1))
    }
}

/// The session operations over one Redis. Clone it freely: the connection is shared.
#[derive(Clone)]
pub struct Sessions {
    conn: RedisConn,
    keys: Keys,
    lifetimes: Lifetimes,
    /// Most sessions per user (0: no cap; see [`user_sessions`]).
    max_per_user: u32,
    /// Shared by every clone: this process's batch of views and the touches it
    /// holds back ([`Sessions::touch_later`]), in one allocation (every request
    /// clones the sessions with its layer).
    batches: Arc<views::Batches>,
}

impl Sessions {
    /// Sessions stored under `keys`.
    pub fn new(conn: RedisConn, keys: Keys) -> Self {
        Self {
            conn,
            keys,
            lifetimes: Lifetimes::default(),
            max_per_user: DEFAULT_MAX_PER_USER,
            batches: Arc::default(),
        }
    }

    /// The same sessions (and this process's batches) over another handle of the
    /// same Redis: the view flusher writes with the connection's own time-out,
    /// not a request's budget ([`RedisConn::with_budget`]).
    pub fn over(&self, conn: RedisConn) -> Self {
        Self {
            conn,
            ..self.clone()
        }
    }

    /// The same sessions expiring after `lifetimes` (the defaults unless set).
    pub fn with_lifetimes(mut self, lifetimes: Lifetimes) -> Self {
        self.lifetimes = lifetimes;
        self
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
    /// worthless after it); the move itself is one atomic script, around which the
    /// user's list of sessions is kept ([`user_sessions`]). The old token is gone
    /// from every structure.
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
        self.login_from(old, user, once, &Device::default()).await
    }

    /// [`Sessions::login`] from `device`, which the user's list of sessions shows
    /// (see [`user_sessions`]): every login is in that list, and a login past the
    /// cap of sessions per user ends the user's least recently seen session.
    pub async fn login_from(
        &self,
        old: &SessionToken,
        user: UserId,
        once: Option<&str>,
        device: &Device,
    ) -> Result<SessionToken, CacheError> {
        let Some(form_key) = once else {
            return self.rotate(old, user, device).await;
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
            let new = match self.rotate(old, user, device).await {
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
        self.rotate(old, user, device).await
    }

    /// The move itself: a fresh token in the old one's shard, one script; around
    /// it, the user's index of sessions (the new token listed first, the old one
    /// taken out after: see [`user_sessions`]) and the cap per user.
    async fn rotate(
        &self,
        old: &SessionToken,
        user: UserId,
        device: &Device,
    ) -> Result<SessionToken, CacheError> {
        // In the same shard as the old token, so the move is one script in one slot.
        let new = self.keys.fresh_token_beside(old);
        let listed = self.index(user, &new, device).await?;
        let was: Option<String> = login_move(&self.keys, old, &new, user)
            .invoke_async(&mut self.conn.clone())
            .await?;
        // The login is done: what follows tidies up, and a failure of it must not
        // turn a login that happened into an error (the browser would keep a
        // token that is no session). A leftover entry is dropped at the next
        // listing; the cap is applied again at the next login.
        if let Some(was) = was.and_then(|raw| raw.parse::<UserId>().ok())
            && let Err(error) = self.unindex(&[(old.clone(), was)]).await
        {
            tracing::warn!(%error, "a login could not take the old session out of its list");
        }
        if let Err(error) = self.enforce_cap(user, &new, listed).await {
            tracing::warn!(%error, "a login could not apply the cap of sessions per user");
        }
        Ok(new)
    }

    /// Ends a session: its login, last-seen entries, history and cart are removed
    /// together, so the token is worth nothing afterwards; then it leaves its
    /// user's list of sessions.
    pub async fn logout(&self, token: &SessionToken) -> Result<(), CacheError> {
        let (_, user): (u8, Option<String>) = end_call(&self.keys, token, None)
            .invoke_async(&mut self.conn.clone())
            .await?;
        if let Some(user) = user.and_then(|raw| raw.parse::<UserId>().ok()) {
            self.unindex(&[(token.clone(), user)]).await?;
        }
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
        history(&raw)
    }

    /// Lists in `guests:` every session that is a guest (not logged in, no cart),
    /// and in `anonymous:` every one that is not logged in and holds a cart, where
    /// not yet listed: sessions from before these were tracked (an upgrade, `shop
    /// migrate`), or written by the book's own code. Returns how many it listed.
    /// Safe to run while the shop runs: a session that logs in or fills its cart
    /// meanwhile and is listed anyway is dropped from the list by the cleaner
    /// (which checks before removing a guest or an anonymous shopper), never
    /// removed as one.
    pub async fn index_guests(&self) -> Result<u64, CacheError> {
        let mut conn = self.conn.clone();
        let mut listed = 0;
        for shard in self.keys.shards() {
            let mut cursor = 0u64;
            loop {
                let (next, page): (u64, Vec<(String, f64)>) = redis::cmd("ZSCAN")
                    .arg(self.keys.recent_in(shard))
                    .arg(cursor)
                    .arg("COUNT")
                    .arg(1_000)
                    .query_async(&mut conn)
                    .await?;
                if !page.is_empty() {
                    let mut hmget = redis::cmd("HMGET");
                    hmget.arg(self.keys.login_in(shard));
                    let mut exists = redis::pipe();
                    for (token, _) in &page {
                        hmget.arg(token);
                        exists.exists(self.keys.cart_member(shard, token));
                    }
                    let logged: Vec<Option<String>> = hmget.query_async(&mut conn).await?;
                    let carts: Vec<bool> = exists.query_async(&mut conn).await?;
                    let (mut guests, mut anonymous) = (Vec::new(), Vec::new());
                    for ((token, seen), (user, cart)) in page.iter().zip(logged.iter().zip(&carts))
                    {
                        if user.is_none() {
                            let list = if *cart { &mut anonymous } else { &mut guests };
                            list.push((*seen, token.as_str()));
                        }
                    }
                    for (key, list) in [
                        (self.keys.guests_in(shard), &guests),
                        (self.keys.anonymous_in(shard), &anonymous),
                    ] {
                        if !list.is_empty() {
                            let added: u64 = redis::cmd("ZADD")
                                .arg(key)
                                .arg("NX")
                                .arg(list)
                                .query_async(&mut conn)
                                .await?;
                            listed += added;
                        }
                    }
                }
                cursor = next;
                if cursor == 0 {
                    break;
                }
            }
        }
        Ok(listed)
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
}
