//! The session layer: every visitor has a session token cookie, and every request
//! that sends it back touches its session in one Redis round trip.
//!
//! - A request without a well-formed cookie gets a fresh token in a cookie and
//!   writes nothing to Redis: its session starts when the cookie comes back (or when
//!   the request itself puts something in the cart or logs in). A crawler that
//!   never returns cookies creates no session; its item views still count in the
//!   ranking. A returned token the shop does not know (cleaned, or made up) starts
//!   a guest session under it (why that is safe: [`shop_cache::session`]).
//! - The cookie is `HttpOnly; SameSite=Lax; Path=/`; over HTTPS (configured, or a
//!   trusted proxy's `X-Forwarded-Proto: https`) it is `__Host-shop_session` with
//!   `Secure`, the plain name is not read, and answers carry HSTS.
//! - A returned token whose session is past its lifetime (idle too long, logged in
//!   too long ago: [`shop_cache::session::Lifetimes`]) is refused: the touch removes
//!   the session, and the request goes on as a new visitor's, with a new token.
//! - Item page views (`GET /items/{id}`; not `HEAD`) count only when the page
//!   answered 200, so made-up ids enter neither the `viewed:` ranking nor the
//!   history. The item page itself needs no user (its HTML is shared), so its
//!   touch waits for nothing: with [`SessionLayer::write_behind`] (the shop's) it
//!   is held back and written with the view by the process's flusher within a
//!   tenth of a second ([`Sessions::touch_later`]), so a page from the in-process
//!   tier costs no Redis round trip; without it, it is sent at the same time as
//!   the page's own lookup, with the item in the history, and the answer then
//!   counts the view or takes the item out of the history again. Every other
//!   request is touched before its handler, which finds the result as a
//!   [`Session`] extension.
//! - Handlers that change the token (login, logout) return a [`NewToken`] extension;
//!   this layer writes every session `Set-Cookie`, outside any cached response.
//! - It is mounted on the visitors' routes only: probes and static files never
//!   create sessions (`/metrics` is not on the visitors' router at all).
//! - If Redis fails, the request goes on as a guest (logged, counted): pages that do
//!   not need a user still work.
//!
//! The layer's state is a [`SessionLayer`] (the sessions, the cookie flag, which
//! paths are item pages, an error counter), not the shop's `AppState`, so another
//! axum app mounts it as it is: `examples/mini_shop.rs` does, with the page cache,
//! on routes of its own (and a test runs it).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use axum::extract::{FromRequestParts, Request, State};
use axum::http::header::{COOKIE, SET_COOKIE, STRICT_TRANSPORT_SECURITY};
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::Response;
use shop_cache::domain::{ItemId, UserId};
use shop_cache::session::{SessionToken, Sessions, Touch, Touched};

use crate::error::{Cause, WebError};

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
}

impl Session {
    /// The logged-in user, or 401.
    pub fn require_user(&self) -> Result<UserId, WebError> {
        self.user.ok_or_else(WebError::unauthorized)
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
fn cookie_value(headers: &HeaderMap, name: &str) -> Option<String> {
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
    /// Which paths are item pages, whose views are recorded (the shop's:
    /// [`crate::page_cache::item_path`], `/items/{id}`).
    pub item_of: fn(&str) -> Option<ItemId>,
    /// Counts requests served as guests because the session store failed.
    pub errors: Arc<AtomicU64>,
    /// Item pages' touches are held back and written by the process's
    /// [`shop_cache::session::ViewFlusher`] (which must run: the shop's servers
    /// run it) instead of travelling with the page. A session past its lifetime
    /// is then ended by that write, and its next request that waits for its
    /// session (the page's own `/api/me`) gets the new cookie.
    pub write_behind: bool,
}

impl SessionLayer {
    /// The layer over `sessions` with the shop's item pages and a fresh counter.
    pub fn new(sessions: Sessions, secure_cookies: bool) -> Self {
        Self {
            sessions,
            secure_cookies,
            trust_forwarded_proto: false,
            item_of: crate::page_cache::item_path,
            errors: Arc::default(),
            write_behind: false,
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

    /// The item of an item page request, if this is one.
    fn item_page(&self, req: &Request) -> Option<ItemId> {
        if req.method() != Method::GET {
            return None;
        }
        (self.item_of)(req.uri().path())
    }
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
    // A client that says it is a bot is a session like any other, but its item
    // views count in the ranking only, as a cookieless client's do: not in its
    // history, nor among an item's viewers (what "X% of N shoppers" counts).
    let (item, bot_view) = match state.item_page(&req) {
        Some(item) if says_it_is_a_bot(req.headers()) => (None, Some(item)),
        item => (item, None),
    };
    let (mut resp, mut issued) = match (presented, item) {
        // No session yet: a token for the cookie, and nothing written. A view of an
        // item page still counts in the ranking, once the page answered 200.
        (None, _) => {
            let token = SessionToken::generate();
            req.extensions_mut().insert(Session {
                token: token.clone(),
                user: None,
                https,
            });
            let resp = next.run(req).await;
            if let Some(item) = item
                && resp.status() == StatusCode::OK
            {
                state.sessions.count_view(item);
            }
            (resp, Some(token))
        }
        // The item page needs nobody's identity: its touch is held back and
        // written with the next batch.
        (Some(token), Some(item)) if state.write_behind => {
            req.extensions_mut().insert(Session {
                token: token.clone(),
                user: None,
                https,
            });
            let resp = next.run(req).await;
            let found = resp.status() == StatusCode::OK;
            if state.sessions.touch_later(&token, found.then_some(item)) {
                (resp, None)
            } else {
                // This process holds as many touches as it may (Redis is not
                // taking them): this one is written now, or lost with the request.
                let touch = match found {
                    true => Touch::request().view(item),
                    false => Touch::request(),
                };
                match state.sessions.touch(&token, touch).await {
                    Ok(Touched::Expired) => (resp, Some(SessionToken::generate())),
                    Ok(_) => (resp, None),
                    Err(error) => {
                        session_error(state, &error);
                        (resp, None)
                    }
                }
            }
        }
        // Otherwise its touch goes out at the same time as the page (whose lookup is its own round trip), the view held
        // until the answer says whether the page was found.
        (Some(token), Some(item)) => {
            req.extensions_mut().insert(Session {
                token: token.clone(),
                user: None,
                https,
            });
            let (resp, (session, renewed)) =
                tokio::join!(next.run(req), identify(state, token, Some(item), https));
            let found = resp.status() == StatusCode::OK;
            if renewed {
                // The session had expired: the view counts as a new visitor's.
                if found {
                    state.sessions.count_view(item);
                }
                (resp, Some(session.token))
            } else {
                if let Err(error) = state
                    .sessions
                    .settle_view(&session.token, item, found)
                    .await
                {
                    session_error(state, &error);
                }
                (resp, None)
            }
        }
        (Some(token), None) => {
            let (session, renewed) = identify(state, token, None, https).await;
            let issued = renewed.then(|| session.token.clone());
            req.extensions_mut().insert(session);
            (next.run(req).await, issued)
        }
    };
    if let Some(item) = bot_view
        && resp.status() == StatusCode::OK
    {
        state.sessions.count_view(item);
    }
    if let Some(NewToken(token)) = resp.extensions_mut().remove::<NewToken>() {
        issued = Some(token);
    }
    if let Some(token) = issued
        && let Ok(cookie) = HeaderValue::from_str(&cookie(&token, https))
    {
        resp.headers_mut().append(SET_COOKIE, cookie);
    }
    if https {
        resp.headers_mut()
            .insert(STRICT_TRANSPORT_SECURITY, HeaderValue::from_static(HSTS));
    }
    resp
}

/// Touches the session of a token the client sent back (starting it, if the shop
/// does not know it yet). With `ahead`, the touch carries that item page's view
/// before the page has answered ([`Touch::view_ahead`]), settled by the caller.
/// A session past its lifetime is gone (the touch removed it): the visitor gets a
/// new token, as one who sent none (nothing written), and `true` says so.
async fn identify(
    state: &SessionLayer,
    token: SessionToken,
    ahead: Option<ItemId>,
    https: bool,
) -> (Session, bool) {
    let touch = match ahead {
        Some(item) => Touch::request().view_ahead(item),
        None => Touch::request(),
    };
    match state.sessions.touch(&token, touch).await {
        Ok(Touched::Expired) => (
            Session {
                token: SessionToken::generate(),
                user: None,
                https,
            },
            true,
        ),
        Ok(touched) => (
            Session {
                user: touched.user(),
                token,
                https,
            },
            false,
        ),
        Err(error) => {
            session_error(state, &error);
            (
                Session {
                    token,
                    user: None,
                    https,
                },
                false,
            )
        }
    }
}

/// Counts and logs a failed touch (quietly while Redis is known to be down).
fn session_error(state: &SessionLayer, error: &shop_cache::CacheError) {
    state.errors.fetch_add(1, Ordering::Relaxed);
    Cause::redis(error, "session store unavailable; serving as a guest").log();
}

/// The cookie holding a browser's device proof (see
/// [`shop_cache::login_limit::Devices`]); over HTTPS [`SECURE_DEVICE_COOKIE`].
pub const DEVICE_COOKIE: &str = "shop_device";
/// [`DEVICE_COOKIE`] over HTTPS, with the same `__Host-` rules as the session's.
pub const SECURE_DEVICE_COOKIE: &str = "__Host-shop_device";

/// How long a browser keeps its device cookie: as long as the shop trusts it.
const DEVICE_MAX_AGE: std::time::Duration = shop_cache::login_limit::DEVICE_LIFETIME;

/// The device cookie's value the request carries, if any (under the name its
/// transport uses). Bounded like the session cookie; its contents are checked by
/// the login limiter.
pub fn device_cookie(headers: &HeaderMap, https: bool) -> Option<String> {
    let name = if https {
        SECURE_DEVICE_COOKIE
    } else {
        DEVICE_COOKIE
    };
    cookie_value(headers, name).filter(|v| v.len() <= 100)
}

/// The `Set-Cookie` value of a device cookie: `HttpOnly`, `SameSite=Lax`, kept for
/// [`shop_cache::login_limit::DEVICE_LIFETIME`]; over HTTPS `__Host-` and `Secure`.
pub fn device_set_cookie(value: &str, https: bool) -> String {
    let name = if https {
        SECURE_DEVICE_COOKIE
    } else {
        DEVICE_COOKIE
    };
    ::cookie::Cookie::build((name, value))
        .path("/")
        .http_only(true)
        .same_site(::cookie::SameSite::Lax)
        .secure(https)
        .max_age(::cookie::time::Duration::seconds(
            DEVICE_MAX_AGE.as_secs() as i64
        ))
        .build()
        .to_string()
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

/// Words in a `User-Agent` by which crawlers, link previewers and HTTP libraries
/// name themselves (lower case). A bot that passes for a browser is not caught:
/// this keeps honest bots out of the shopper counts, nothing more.
const BOT_WORDS: &[&str] = &[
    "bot",
    "crawl",
    "spider",
    "slurp",
    "curl/",
    "wget/",
    "python-requests",
    "python-urllib",
    "go-http-client",
    "java/",
    "libwww",
    "scrapy",
    "httpclient",
    "facebookexternalhit",
    "preview",
    "phantomjs",
    "ahrefs",
    "semrush",
];

/// Whether the request's `User-Agent` says it comes from a bot (one of the words in
/// `BOT_WORDS`, in any case). Asked on every item view: no allocation.
pub fn says_it_is_a_bot(headers: &HeaderMap) -> bool {
    let Some(agent) = headers.get(axum::http::header::USER_AGENT) else {
        return false;
    };
    let agent = agent.as_bytes();
    BOT_WORDS.iter().any(|word| {
        agent
            .windows(word.len())
            .any(|w| w.eq_ignore_ascii_case(word.as_bytes()))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bots_are_told_by_the_words_they_use_and_browsers_are_not_bots() {
        let with = |agent: &str| {
            let mut h = HeaderMap::new();
            h.insert(
                axum::http::header::USER_AGENT,
                HeaderValue::from_str(agent).unwrap(),
            );
            says_it_is_a_bot(&h)
        };
        assert!(with(
            "Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)"
        ));
        assert!(with("curl/8.5.0"));
        assert!(with("python-requests/2.31"));
        assert!(with("facebookexternalhit/1.1"));
        assert!(!with(
            "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.0.0 Safari/537.36"
        ));
        assert!(!with(
            "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) HeadlessChrome/131.0.0.0 Safari/537.36"
        ));
        assert!(
            !says_it_is_a_bot(&HeaderMap::new()),
            "no user agent: not said"
        );
    }

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
