//! The session layer: who is asking. Every visitor has a session token cookie, and
//! every request that sends it back touches its session in one Redis round trip;
//! the handler finds the result as a [`Session`] extension.
//!
//! - A request without a well-formed cookie gets a fresh token in a cookie and
//!   writes nothing to Redis: its session starts when the cookie comes back (or when
//!   the request itself puts something in the cart or logs in). A crawler that
//!   never returns cookies creates no session. A returned token the shop does not
//!   know (cleaned, or made up) starts a guest session under it (why that is safe:
//!   [`shop_cache::session`]).
//! - The cookie is `HttpOnly; SameSite=Lax; Path=/`; over HTTPS (configured, or a
//!   trusted proxy's `X-Forwarded-Proto: https`) it is `__Host-shop_session` with
//!   `Secure`, the plain name is not read, and answers carry HSTS.
//! - A returned token whose session is past its lifetime (idle too long, logged in
//!   too long ago: [`shop_cache::session::Lifetimes`]) is refused: the touch removes
//!   the session, and the request goes on as a new visitor's, with a new token.
//! - Views of item pages are counted with the session's touch, by
//!   [`crate::views`] (the layer hands those requests to it when it has an
//!   [`ItemViews`]): their page needs no user, so their touch need not wait.
//! - Handlers that change the token (login, logout) return a [`NewToken`] extension;
//!   this layer writes every session `Set-Cookie`, outside any cached response,
//!   and never on a page marked `Cache-Control: public` (the page cache's pages,
//!   the same for everyone): a new visitor's cookie then comes with the page's
//!   `/api/me` call. Any answer that says nothing of caching is sent
//!   `Cache-Control: private, no-store`: the visitors' routes are personal
//!   unless a page says it is shared.
//! - It is mounted on the visitors' routes only: probes and static files never
//!   create sessions (`/metrics` is not on the visitors' router at all).
//! - If Redis fails, the request goes on as a guest (logged, counted): pages that do
//!   not need a user still work.
//!
//! The layer's state is a [`SessionLayer`] (the sessions, the cookie flags, the
//! item views, an error counter), not the shop's `AppState`, so another axum app
//! mounts it as it is: `examples/mini_shop.rs` does, with the page cache, on routes
//! of its own (and a test runs it).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use axum::extract::{FromRequestParts, Request, State};
use axum::http::header::{CACHE_CONTROL, COOKIE, SET_COOKIE, STRICT_TRANSPORT_SECURITY};
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::Response;
use shop_cache::domain::{ItemId, UserId};
use shop_cache::session::{Holdings, SessionToken, Sessions, Touch, Touched};

use crate::error::{Cause, WebError};
use crate::me::MeQuery;
pub use crate::views::ItemViews;

/// The cookie holding the session token.
pub const COOKIE_NAME: &str = "shop_session";

/// The cookie's name over HTTPS: the `__Host-` prefix makes the browser accept it
/// only with `Secure`, `Path=/` and no `Domain`, so a sibling subdomain cannot
/// plant a session cookie that wins over the shop's (a plain `shop_session` is not
/// read then at all).
pub const SECURE_COOKIE_NAME: &str = "__Host-shop_session";

/// The `Strict-Transport-Security` of answers over HTTPS: a year, so a browser
/// that saw the shop once never talks plain HTTP to it again.
pub const HSTS: &str = "max-age=31536000";

/// A cookie value longer than this is not even looked at.
const MAX_COOKIE_HEADER: usize = 4096;

/// Who is asking, as the session layer found out.
#[derive(Debug, Clone)]
pub struct Session {
    /// The request's session token (possibly issued by this request).
    pub token: SessionToken,
    /// The logged-in user, if any.
    pub user: Option<UserId>,
    /// The request came over HTTPS (configured, or a trusted proxy said so): the
    /// cookies a handler sets get `Secure` and the `__Host-` prefix.
    pub https: bool,
    /// The session store did not answer (Redis down, or stalled past the
    /// request's budget): the visitor is served as a guest where a guest's page
    /// does, but who they are is not known, so what needs the user (or writes
    /// the session's state) answers 503, never "log in".
    pub store_failed: bool,
}

impl Session {
    /// A visitor not logged in (or not known to be), under `token`.
    pub fn guest(token: SessionToken, https: bool) -> Self {
        Self {
            token,
            user: None,
            https,
            store_failed: false,
        }
    }

    /// The logged-in user, or 401 (503 while the store cannot say).
    pub fn require_user(&self) -> Result<UserId, WebError> {
        self.known_user()?.ok_or_else(WebError::unauthorized)
    }

    /// The logged-in user or none; 503 (with `Retry-After`) while the session
    /// store cannot say which. That answer's cause is `debug`: the store's
    /// failure was logged as the touch failed (at its level, quietly while the
    /// store is known to be down), not again at every request it refuses.
    pub fn known_user(&self) -> Result<Option<UserId>, WebError> {
        if self.store_failed {
            return Err(WebError::unavailable().caused_by(Cause::new(
                tracing::Level::DEBUG,
                "the session store could not say who is asking",
            )));
        }
        Ok(self.user)
    }
}

impl<S: Send + Sync> FromRequestParts<S> for Session {
    type Rejection = WebError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        parts.extensions.get::<Session>().cloned().ok_or_else(|| {
            WebError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", "no session")
        })
    }
}

/// Set by a handler on its response to move the visitor to another token.
#[derive(Debug, Clone)]
pub struct NewToken(pub SessionToken);

/// The session token from the `Cookie` header, if there is a well-formed one.
/// Anything else (missing, malformed, oversized) is treated as no cookie. Parsed
/// by the `cookie` crate; the token itself by [`SessionToken`]'s own rules.
pub fn token(headers: &HeaderMap) -> Option<SessionToken> {
    token_named(headers, COOKIE_NAME)
}

/// [`token`] from the cookie called `name`.
pub fn token_named(headers: &HeaderMap, name: &str) -> Option<SessionToken> {
    cookie_value(headers, name)?.parse().ok()
}

/// The value of the first cookie called `name` in the `Cookie` headers, if any;
/// oversized headers are not even looked at.
pub(crate) fn cookie_value(headers: &HeaderMap, name: &str) -> Option<String> {
    headers
        .get_all(COOKIE)
        .iter()
        .filter(|v| v.len() <= MAX_COOKIE_HEADER)
        .filter_map(|v| v.to_str().ok())
        .flat_map(::cookie::Cookie::split_parse)
        .filter_map(Result::ok)
        .find(|c| c.name() == name)
        .map(|c| c.value().to_owned())
}

/// What the session layer needs, and nothing of the rest of the shop, so any
/// axum app can mount it: `from_fn_with_state(SessionLayer { .. }, track)`.
#[derive(Clone)]
pub struct SessionLayer {
    /// Where sessions live.
    pub sessions: Sessions,
    /// The site is served over HTTPS: the cookie is `__Host-shop_session` with
    /// `Secure`, and answers carry HSTS.
    pub secure_cookies: bool,
    /// Believe a proxy's `X-Forwarded-Proto: https` (the shop behind a TLS
    /// proxy it trusts): such requests are served as over HTTPS.
    pub trust_forwarded_proto: bool,
    /// Which requests are item-page views and how they are counted (none: no
    /// view is counted, every request is identified alike).
    pub views: Option<ItemViews>,
    /// The path (`GET`) whose requests also read what the session holds in their
    /// touch's round trip, handed to the handler as a [`Holdings`] extension (the
    /// shop's: `/api/me`); none: no request reads it here.
    pub holdings_on: Option<&'static str>,
    /// Counts requests served as guests because the session store failed.
    pub errors: Arc<AtomicU64>,
    /// Each client address's share of the views that count (none: every view
    /// counts): see [`crate::view_shares`].
    pub view_shares: Option<crate::view_shares::ViewShares>,
}

impl SessionLayer {
    /// The layer over `sessions`, counting no item views, with a fresh counter.
    pub fn new(sessions: Sessions, secure_cookies: bool) -> Self {
        Self {
            sessions,
            secure_cookies,
            trust_forwarded_proto: false,
            views: None,
            holdings_on: None,
            errors: Arc::default(),
            view_shares: None,
        }
    }

    /// The same layer reading what the session holds for `GET path` (see
    /// [`SessionLayer::holdings_on`]).
    pub fn with_holdings_on(mut self, path: &'static str) -> Self {
        self.holdings_on = Some(path);
        self
    }

    /// The query of a per-user call (`GET` on [`SessionLayer::holdings_on`]),
    /// read once ([`MeQuery::parse`]); `None` for every other request.
    fn per_user_query(&self, req: &Request) -> Option<Result<MeQuery, String>> {
        let path = self.holdings_on?;
        (req.method() == axum::http::Method::GET && req.uri().path() == path)
            .then(|| MeQuery::parse(req.uri().query()))
    }

    /// The same layer counting the item-page views `views` says.
    pub fn with_views(mut self, views: ItemViews) -> Self {
        self.views = Some(views);
        self
    }

    /// The item view `req` is: an item page's, or the one its per-user call
    /// names (`asked`, see [`crate::views`]).
    fn view_of(&self, req: &Request, asked: Option<MeQuery>) -> Option<Viewed> {
        let views = self.views.as_ref()?;
        if let Some(view) = views.of(req) {
            return Some(Viewed::Page(view));
        }
        let asked = asked?;
        match (asked.item, asked.seen) {
            (Some(item), _) => Some(Viewed::Named(crate::views::View::by(req, item))),
            // A bot's session has no history (it is told of no new session).
            (None, Some(item)) if !crate::views::says_it_is_a_bot(req.headers()) => {
                Some(Viewed::Seen(item))
            }
            (None, _) => None,
        }
    }

    /// Whether `req` came over HTTPS, as far as the shop can know.
    fn https(&self, req: &Request) -> bool {
        self.secure_cookies
            || (self.trust_forwarded_proto
                && req
                    .headers()
                    .get("x-forwarded-proto")
                    .and_then(|v| v.to_str().ok())
                    .and_then(|v| v.rsplit(',').next())
                    .is_some_and(|proto| proto.trim().eq_ignore_ascii_case("https")))
    }
}

/// How a request views an item ([`SessionLayer::view_of`]).
enum Viewed {
    /// It asks for the item's page.
    Page(crate::views::View),
    /// It is the per-user call of a page the edge served, naming its item.
    Named(crate::views::View),
    /// It is a per-user call naming the item of a page counted already, for
    /// the history of a session that page found none of (`seen=`).
    Seen(ItemId),
}

/// The session layer's middleware; see the module documentation.
pub async fn track(State(state): State<SessionLayer>, req: Request, next: Next) -> Response {
    track_in(&state, req, next).await
}

/// [`track`] over a shared [`SessionLayer`]: axum clones a middleware's state for
/// every request, and the layer's parts are several reference counts, the `Arc`
/// one (the shop's router mounts this one).
pub async fn track_shared(
    State(state): State<Arc<SessionLayer>>,
    req: Request,
    next: Next,
) -> Response {
    track_in(&state, req, next).await
}

async fn track_in(state: &SessionLayer, mut req: Request, next: Next) -> Response {
    let https = state.https(&req);
    let presented = token_named(
        req.headers(),
        if https {
            SECURE_COOKIE_NAME
        } else {
            COOKIE_NAME
        },
    );
    // A per-user call whose query says nothing the handler can answer (a
    // `recent=` that is no count, an `item=` that is no item id) is refused
    // here: it touches no session and counts no view.
    let (mut resp, mut issued) = match state.per_user_query(&req).transpose() {
        Err(refused) => (
            axum::response::IntoResponse::into_response(WebError::bad_request(refused)),
            None,
        ),
        Ok(asked) => {
            if let Some(asked) = asked {
                req.extensions_mut().insert(asked);
            }
            let viewed = state.view_of(&req, asked);
            // Past the client's share, a view is served but counted nowhere.
            let counted = matches!(viewed, Some(Viewed::Page(_) | Viewed::Named(_)))
                && state
                    .view_shares
                    .as_ref()
                    .is_none_or(|shares| shares.counts(&req));
            match viewed {
                Some(Viewed::Page(view)) => {
                    crate::views::serve(state, view, counted, presented, https, req, next).await
                }
                Some(Viewed::Named(view)) => {
                    crate::views::serve_named(state, view, counted, presented, https, req, next)
                        .await
                }
                Some(Viewed::Seen(item)) => {
                    crate::views::serve_seen(state, item, presented, https, req, next).await
                }
                None => run_identified(state, presented, https, req, next).await,
            }
        }
    };
    if let Some(NewToken(token)) = resp.extensions_mut().remove::<NewToken>() {
        issued = Some(token);
    }
    // A page the same for everyone (`Cache-Control: public`: the page cache marks
    // those) carries no cookie, so a shared cache between the shop and the browser
    // may keep it and never hands one visitor's cookie to the next: the page's own
    // `/api/me` call gives the visitor its cookie.
    if let Some(token) = issued
        && !is_shared(&resp)
        && let Ok(cookie) = HeaderValue::from_str(&cookie(&token, https))
    {
        resp.headers_mut().append(SET_COOKIE, cookie);
    }
    // Every other answer of the visitors' routes is this visitor's (a cart, an
    // account, a form, an answer to a POST): one that says nothing of caching is
    // marked so, or a shared cache could keep it and assign it a freshness of
    // its own. (A 304 only confirms what the browser holds.)
    if resp.status() != StatusCode::NOT_MODIFIED && !resp.headers().contains_key(CACHE_CONTROL) {
        resp.headers_mut()
            .insert(CACHE_CONTROL, HeaderValue::from_static(crate::PERSONAL));
    }
    if https {
        resp.headers_mut()
            .insert(STRICT_TRANSPORT_SECURITY, HeaderValue::from_static(HSTS));
    }
    resp
}

/// Whether `resp` says it is the same for everyone (`Cache-Control: public`).
fn is_shared(resp: &Response) -> bool {
    resp.headers()
        .get_all(CACHE_CONTROL)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|directive| directive.trim().eq_ignore_ascii_case("public"))
}

/// Runs the handler with the [`Session`] of the token presented (touched first),
/// or of a new token, nothing written, for a visitor who sent none. Returns the
/// answer and the token to set in a cookie, if the visitor gets a new one.
pub(crate) async fn run_identified(
    state: &SessionLayer,
    presented: Option<SessionToken>,
    https: bool,
    req: Request,
    next: Next,
) -> (Response, Option<SessionToken>) {
    run_touched(state, presented, Touch::request(), https, req, next).await
}

/// [`run_identified`], the presented token's session touched with `touch`.
pub(crate) async fn run_touched(
    state: &SessionLayer,
    presented: Option<SessionToken>,
    touch: Touch,
    https: bool,
    mut req: Request,
    next: Next,
) -> (Response, Option<SessionToken>) {
    // A per-user call reads what the session holds: its history's newest
    // `recent` items.
    let read = req.extensions().get::<MeQuery>().map(|asked| asked.recent);
    let (session, issued, holdings) = match presented {
        None => {
            let session = Session::guest(SessionToken::generate(), https);
            let issued = session.token.clone();
            // A new token holds nothing.
            (session, Some(issued), read.map(|_| Holdings::default()))
        }
        Some(token) => {
            let (session, renewed, holdings) =
                identify_with(state, token, touch, https, read).await;
            let issued = renewed.then(|| session.token.clone());
            (session, issued, holdings)
        }
    };
    req.extensions_mut().insert(session);
    if let Some(holdings) = holdings {
        req.extensions_mut().insert(holdings);
    }
    // Only the per-user call reads it: no other request pays for the bot check.
    if read.is_some() && issued.is_some() && !crate::views::says_it_is_a_bot(req.headers()) {
        req.extensions_mut().insert(Issued);
    }
    (next.run(req).await, issued)
}

/// A request extension: this request's session is new, its token handed out
/// with this answer (the visitor sent none, or one past its lifetime), so
/// nothing the visitor did before it is in the session. `/api/me` says so
/// (`"new_session": true`). Not for a client that says it is a bot (its
/// session has no history to put its page in).
#[derive(Debug, Clone, Copy)]
pub struct Issued;

/// Touches the session of a token the client sent back (starting it, if the shop
/// does not know it yet). With `ahead`, the touch carries that item page's view
/// before the page has answered ([`Touch::view_ahead`]), settled by the caller.
/// A session past its lifetime is gone (the touch removed it): the visitor gets a
/// new token, as one who sent none (nothing written), and `true` says so.
pub(crate) async fn identify(
    state: &SessionLayer,
    token: SessionToken,
    ahead: Option<ItemId>,
    https: bool,
) -> (Session, bool) {
    let touch = match ahead {
        Some(item) => Touch::request().view_ahead(item),
        None => Touch::request(),
    };
    let (session, renewed, _) = identify_with(state, token, touch, https, None).await;
    (session, renewed)
}

/// [`identify`] with `touch`, and with what the session holds when `read` (its
/// history's newest `read` items; in the same round trip; none when the store
/// failed).
async fn identify_with(
    state: &SessionLayer,
    token: SessionToken,
    touch: Touch,
    https: bool,
    read: Option<usize>,
) -> (Session, bool, Option<Holdings>) {
    // A plain read, the touch held back for the flusher (where the process
    // writes touches behind), when the session is known and not near the end
    // of a lifetime: `/api/me`, on every page view.
    let behind = state.views.is_some_and(|views| views.write_behind);
    if let Some(history) = read.filter(|_| behind && touch == Touch::request()) {
        match state.sessions.peek(&token, history).await {
            Ok(Some((user, holdings))) if state.sessions.touch_later(&token, None) => {
                let session = Session {
                    user,
                    token,
                    https,
                    store_failed: false,
                };
                return (session, false, Some(holdings));
            }
            // Unknown, near a lifetime's end, or no room to hold it: touched now.
            Ok(_) => {}
            Err(error) => return store_failed(state, &error, token, https),
        }
    }
    let touched = match read {
        Some(_) => state
            .sessions
            .touch_and_read(&token, touch)
            .await
            .map(|(touched, holdings)| (touched, Some(holdings))),
        None => state
            .sessions
            .touch(&token, touch)
            .await
            .map(|touched| (touched, None)),
    };
    match touched {
        Ok((Touched::Expired, _)) => (
            Session::guest(SessionToken::generate(), https),
            true,
            read.map(|_| Holdings::default()),
        ),
        Ok((touched, holdings)) => (
            Session {
                user: touched.user(),
                token,
                https,
                store_failed: false,
            },
            false,
            holdings,
        ),
        Err(error) => store_failed(state, &error, token, https),
    }
}

/// What [`identify_with`] answers when the session store failed: the visitor
/// served as a guest, marked so ([`Session::store_failed`]), nothing known.
fn store_failed(
    state: &SessionLayer,
    error: &shop_cache::CacheError,
    token: SessionToken,
    https: bool,
) -> (Session, bool, Option<Holdings>) {
    session_error(state, error);
    let session = Session {
        store_failed: true,
        ..Session::guest(token, https)
    };
    (session, false, None)
}

/// Counts and logs a failed touch (quietly while Redis is known to be down).
pub(crate) fn session_error(state: &SessionLayer, error: &shop_cache::CacheError) {
    state.errors.fetch_add(1, Ordering::Relaxed);
    Cause::redis(error, "session store unavailable; serving as a guest").log();
}

/// The `Set-Cookie` value for a session token (built by the `cookie` crate): over
/// HTTPS (`secure`), [`SECURE_COOKIE_NAME`] with `Secure`.
pub fn cookie(token: &SessionToken, secure: bool) -> String {
    let name = if secure {
        SECURE_COOKIE_NAME
    } else {
        COOKIE_NAME
    };
    ::cookie::Cookie::build((name, token.expose()))
        .path("/")
        .http_only(true)
        .same_site(::cookie::SameSite::Lax)
        .secure(secure)
        .build()
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_cookie(v: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(COOKIE, HeaderValue::from_str(v).unwrap());
        h
    }

    #[test]
    fn finds_the_token_among_other_cookies() {
        let t = SessionToken::generate();
        let h = with_cookie(&format!("a=1; {COOKIE_NAME}={}; b=2", t.expose()));
        assert_eq!(token(&h), Some(t));
    }

    #[test]
    fn bad_cookies_are_no_cookie() {
        for v in [
            "",
            "shop_session=",
            "shop_session=short",
            "shop_session=AAAAAAAAAAAAAAAAAAAAA:",
            &format!("shop_session={}", "A".repeat(5000)),
            "other=AAAAAAAAAAAAAAAAAAAAAA",
        ] {
            assert_eq!(token(&with_cookie(v)), None, "{v}");
        }
        assert_eq!(token(&HeaderMap::new()), None);
    }

    #[test]
    fn the_cookie_has_its_flags() {
        let t = SessionToken::generate();
        let plain = cookie(&t, false);
        assert!(
            plain.contains("HttpOnly")
                && plain.contains("SameSite=Lax")
                && plain.contains("Path=/")
        );
        assert!(!plain.contains("Secure"));
        let secure = cookie(&t, true);
        assert!(secure.contains("; Secure") && secure.contains("Path=/"));
        assert!(!secure.contains("Domain"));
        assert!(secure.starts_with(&format!("__Host-shop_session={};", t.expose())));
        assert!(plain.starts_with(&format!("{COOKIE_NAME}={};", t.expose())));
    }
}
