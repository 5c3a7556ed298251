//! Accounts: signing up, logging in and out. Logging in checks the password against its argon2 hash, then
//! moves the session to a fresh token (a token planted before login is worthless
//! after it) keeping the cart and the viewed history. Logging out ends the session.
//!
//! Before any hashing, in this order: the fields are checked (`next` must be a path
//! on this site: 400 otherwise, before anything changes), then the attempt is
//! counted against the limits per client address and per account name
//! ([`shop_cache::login_limit`], shared by every web server through Redis): over
//! either, 429 with `Retry-After`, no hash computed. The login form carries a
//! one-time key, so submitting it twice logs in once and both answers carry the
//! same new session (see `Sessions::login`); JSON clients may send it as
//! `Idempotency-Key`. Logging in on a browser logged in as someone else does not
//! carry their cart over.

use std::collections::HashMap;
use std::net::SocketAddr;

use axum::extract::{ConnectInfo, FromRequestParts, Query, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use axum::{Form, Json, Router};
use serde_json::json;
use shop_app::accounts::{Attempted, LoggedIn, Outcome};
use shop_cache::cart::Merged;
use shop_cache::domain::account::check_new_account;
use shop_cache::domain::client::ClientAddress;
use shop_cache::session::{Device, SessionToken};

use crate::AppState;
use crate::error::WebError;
use crate::request::{Next, idempotency_key, local_path, wants_json};
use crate::session::{NewToken, Session};
use crate::templates::{self, LoginPage, SignupPage};

/// Names and passwords longer than this are refused before any hashing.
const MAX_FIELD: usize = 200;

/// The peer's address, when the server recorded it (`ConnectInfo`); `None` when
/// the router is driven without a socket (tests, or an app that serves it without
/// connect info: then only the per-name limit applies). Behind a reverse proxy the
/// peer is the proxy: set `WebConfig::trust_forwarded_for` (see [`client_address`]).
pub struct PeerAddr(pub Option<std::net::IpAddr>);

impl<S: Send + Sync> FromRequestParts<S> for PeerAddr {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        Ok(Self(
            parts
                .extensions
                .get::<ConnectInfo<SocketAddr>>()
                .map(|ConnectInfo(addr)| addr.ip()),
        ))
    }
}

/// The client's address: the peer's, or, when the shop is told it sits behind a
/// reverse proxy, the last `X-Forwarded-For` entry (the one the proxy itself
/// added; earlier entries are the client's to forge).
pub fn client_ip(
    peer: Option<std::net::IpAddr>,
    headers: &HeaderMap,
    trust_forwarded_for: bool,
) -> Option<std::net::IpAddr> {
    let forwarded = trust_forwarded_for
        .then(|| {
            headers
                .get_all("x-forwarded-for")
                .iter()
                .next_back()?
                .to_str()
                .ok()?
                .rsplit(',')
                .next()?
                .trim()
                .parse::<std::net::IpAddr>()
                .ok()
        })
        .flatten();
    Some(forwarded.or(peer)?.to_canonical())
}

/// The address every per-client limit counts ([`client_ip`]): IPv6 addresses
/// per /64, the block one subscriber usually holds (and its /56 and /48), so
/// rotating addresses inside it buys nothing.
pub fn client_address(
    peer: Option<std::net::IpAddr>,
    headers: &HeaderMap,
    trust_forwarded_for: bool,
) -> Option<ClientAddress> {
    client_ip(peer, headers, trust_forwarded_for).map(ClientAddress::of)
}

/// The network a client is in, as a user's list of sessions shows it: the
/// address's /24 (IPv4) or /48 (IPv6), enough to tell "at home" from "abroad"
/// without keeping anyone's address.
pub fn client_network(ip: Option<std::net::IpAddr>) -> String {
    match ip {
        Some(std::net::IpAddr::V4(v4)) => {
            let o = v4.octets();
            format!("{}.{}.{}.0/24", o[0], o[1], o[2])
        }
        Some(std::net::IpAddr::V6(v6)) => {
            let s = v6.segments();
            format!("{:x}:{:x}:{:x}::/48", s[0], s[1], s[2])
        }
        None => String::new(),
    }
}

/// Where a request comes from, for the user's list of sessions.
pub fn device_of(
    peer: Option<std::net::IpAddr>,
    headers: &HeaderMap,
    trust_forwarded_for: bool,
) -> Device {
    Device {
        user_agent: headers
            .get(header::USER_AGENT)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_owned(),
        network: client_network(client_ip(peer, headers, trust_forwarded_for)),
    }
}

/// The login and logout routes.
pub fn router(state: AppState) -> Router {
    Router::new()
        .route("/login", get(login_form).post(login))
        .route("/signup", get(signup_form).post(signup))
        .route("/logout", post(logout))
        .with_state(state)
}

async fn login(
    State(state): State<AppState>,
    session: Session,
    PeerAddr(peer): PeerAddr,
    headers: HeaderMap,
    Form(form): Form<HashMap<String, String>>,
) -> Result<Response, WebError> {
    let (name, password, next) = credentials(&form)?;
    if name.is_empty()
        || password.is_empty()
        || name.len() > MAX_FIELD
        || password.len() > MAX_FIELD
    {
        return Err(WebError::bad_request("enter a name and a password"));
    }
    // Names are lowercase (the sign-up rules): "Alice", as a phone's keyboard
    // types it, is alice, and counts against alice's login limit.
    let name = name.to_ascii_lowercase();
    let parts = AttemptParts::read(&state, &form, &headers, &session, peer)?;
    match state
        .accounts()
        .log_in(parts.attempt(&session, &name, password))
        .await?
    {
        Outcome::LoggedIn(done) => Ok(logged_in(done, &session, &headers, &next)),
        Outcome::TooMany { retry_after } => Err(too_many(retry_after)),
        Outcome::WrongPassword | Outcome::NameTaken => {
            if wants_json(&headers) {
                return Err(WebError::new(
                    StatusCode::UNAUTHORIZED,
                    "bad_login",
                    "wrong name or password",
                ));
            }
            let page = LoginPage {
                next,
                name,
                message: Some("Wrong name or password.".to_owned()),
                key: SessionToken::generate().expose().to_owned(),
            };
            Ok((StatusCode::UNAUTHORIZED, templates::render(&page)?).into_response())
        }
    }
}

/// The name (trimmed), password and checked `next` of a login or sign-up form.
fn credentials(form: &HashMap<String, String>) -> Result<(&str, &str, String), WebError> {
    let name = form.get("name").map(|s| s.trim()).unwrap_or("");
    let password = form.get("password").map(String::as_str).unwrap_or("");
    let next = local_path(form.get("next").map(String::as_str))?;
    Ok((name, password, next))
}

/// Who is trying a password (a login, a sign-up, a password change), as the
/// login limits and the list of sessions see them.
pub(crate) struct Client {
    /// The address the limits count (IPv6 per /64, /56 and /48).
    pub address: Option<ClientAddress>,
    /// The device cookie it sent, if any.
    pub device: Option<String>,
    /// Its browser and network, for the list of sessions.
    pub from: Device,
}

impl Client {
    /// The client of a request.
    pub fn of(
        state: &AppState,
        headers: &HeaderMap,
        session: &Session,
        peer: Option<std::net::IpAddr>,
    ) -> Self {
        let trust = state.config.trust_forwarded_for;
        Self {
            address: client_address(peer, headers, trust),
            device: device_cookie(headers, session.https),
            from: device_of(peer, headers, trust),
        }
    }
}

/// What a login or sign-up attempt carries besides the name and password: the
/// form's one-time key and the client.
struct AttemptParts {
    once: Option<String>,
    client: Client,
}

impl AttemptParts {
    fn read(
        state: &AppState,
        form: &HashMap<String, String>,
        headers: &HeaderMap,
        session: &Session,
        peer: Option<std::net::IpAddr>,
    ) -> Result<Self, WebError> {
        Ok(Self {
            once: once_key(form, headers, session)?,
            client: Client::of(state, headers, session, peer),
        })
    }

    /// The attempt, for the workflow.
    fn attempt<'a>(
        &'a self,
        session: &'a Session,
        name: &'a str,
        password: &'a str,
    ) -> Attempted<'a> {
        Attempted {
            session: &session.token,
            address: self.client.address.as_ref(),
            name,
            password,
            device: self.client.device.as_deref(),
            from: &self.client.from,
            once: self.once.as_deref(),
        }
    }
}

/// The login form's one-time key, bound to the cookie the browser presented: a
/// double submit carries the same (old) cookie, while another device reusing the
/// key (a JSON client with a fixed Idempotency-Key) gets a session of its own.
fn once_key(
    form: &HashMap<String, String>,
    headers: &HeaderMap,
    session: &Session,
) -> Result<Option<String>, WebError> {
    match form
        .get("key")
        .map(String::as_str)
        .or_else(|| headers.get("idempotency-key").and_then(|v| v.to_str().ok()))
    {
        Some(raw) => {
            let key = idempotency_key(Some(raw))?;
            // The cookie's token when one came (the session layer kept it), else
            // the one this request was given.
            Ok(Some(format!("{key}\n{}", session.token.expose())))
        }
        None => Ok(None),
    }
}

/// 429: too many login attempts from this address or for this name.
pub(crate) fn too_many(retry_after: std::time::Duration) -> WebError {
    WebError::too_many_requests(
        format!(
            "too many attempts; try again in {} s",
            retry_after.as_millis().div_ceil(1000).max(1)
        ),
        retry_after,
    )
}

/// The answer to a login or sign-up that logged in: the session moves to its
/// new token, the browser gets its device cookie, and the answer is JSON
/// (`user`, and `cart_lines_left_out` / `cart_units_cut` when the guest's cart
/// did not fit the account's), or a redirect to `next`, or to the cart page
/// saying what did not fit (`/cart?left_out=N&cut=M`: the cart changed under
/// the shopper, who is to see it before anything else).
fn logged_in(done: LoggedIn, session: &Session, headers: &HeaderMap, next: &str) -> Response {
    let Merged { left_out, cut } = done.merged;
    let mut resp = if wants_json(headers) {
        let mut body = json!({ "user": done.user.get() });
        if left_out > 0 {
            body["cart_lines_left_out"] = json!(left_out);
        }
        if cut > 0 {
            body["cart_units_cut"] = json!(cut);
        }
        Json(body).into_response()
    } else if left_out > 0 || cut > 0 {
        let said: Vec<String> = [("left_out", left_out), ("cut", cut)]
            .iter()
            .filter(|(_, n)| *n > 0)
            .map(|(name, n)| format!("{name}={n}"))
            .collect();
        Redirect::to(&format!("/cart?{}", said.join("&"))).into_response()
    } else {
        Redirect::to(next).into_response()
    };
    resp.extensions_mut().insert(NewToken(done.token));
    if let Ok(cookie) =
        header::HeaderValue::from_str(&device_set_cookie(&done.device, session.https))
    {
        resp.headers_mut().append(header::SET_COOKIE, cookie);
    }
    resp
}

async fn login_form(Query(q): Query<Next>) -> Result<Response, WebError> {
    let page = LoginPage {
        next: local_path(q.next())?,
        name: String::new(),
        message: None,
        key: SessionToken::generate().expose().to_owned(),
    };
    Ok((
        [(header::CACHE_CONTROL, crate::PERSONAL)],
        templates::render(&page)?,
    )
        .into_response())
}

async fn signup_form(Query(q): Query<Next>) -> Result<Response, WebError> {
    let page = SignupPage {
        next: local_path(q.next())?,
        name: String::new(),
        message: None,
        key: SessionToken::generate().expose().to_owned(),
    };
    Ok((
        [(header::CACHE_CONTROL, crate::PERSONAL)],
        templates::render(&page)?,
    )
        .into_response())
}

/// `POST /signup`: checks the name and password ([`check_new_account`]), counts
/// the attempt like a login, creates the user and logs them in as a login would
/// (the guest's cart carried over). A name already taken is a 409, unless the
/// password is that account's: then it is the same form sent twice, and it logs
/// in.
async fn signup(
    State(state): State<AppState>,
    session: Session,
    PeerAddr(peer): PeerAddr,
    headers: HeaderMap,
    Form(form): Form<HashMap<String, String>>,
) -> Result<Response, WebError> {
    let (name, password, next) = credentials(&form)?;
    let refuse = |status: StatusCode, code: &'static str, message: String| {
        if wants_json(&headers) {
            return Err(WebError::new(status, code, message));
        }
        let page = SignupPage {
            next: next.clone(),
            name: name.chars().take(MAX_FIELD).collect(),
            message: Some(message),
            key: SessionToken::generate().expose().to_owned(),
        };
        Ok((status, templates::render(&page)?).into_response())
    };
    if let Err(invalid) = check_new_account(name, password) {
        return refuse(StatusCode::BAD_REQUEST, "bad_request", invalid.to_string());
    }
    let parts = AttemptParts::read(&state, &form, &headers, &session, peer)?;
    match state
        .accounts()
        .sign_up(parts.attempt(&session, name, password))
        .await?
    {
        Outcome::LoggedIn(done) => Ok(logged_in(done, &session, &headers, &next)),
        Outcome::TooMany { retry_after } => Err(too_many(retry_after)),
        Outcome::NameTaken | Outcome::WrongPassword => refuse(
            StatusCode::CONFLICT,
            "name_taken",
            "That name is taken: choose another.".to_owned(),
        ),
    }
}

/// Logouts of sessions nobody is logged in to (a guest's, or a token made up)
/// one client address may send a minute, per server; beyond, 429. Each logout
/// lists its token in `ended:` for two minutes (so a touch held back before it
/// cannot bring the session back), and that list is bounded: a client posting
/// made-up tokens in a loop filled it in under a second, pushing out the real
/// ones. A logged-in user's logout is never refused.
pub const GUEST_LOGOUTS_PER_MINUTE: u32 = 30;

async fn logout(
    State(state): State<AppState>,
    session: Session,
    PeerAddr(peer): PeerAddr,
    headers: HeaderMap,
) -> Result<Response, WebError> {
    if session.user.is_none()
        && !state.guest_logouts.take(client_address(
            peer,
            &headers,
            state.config.trust_forwarded_for,
        ))
    {
        return Err(WebError::too_many_requests(
            "too many logouts from your address; try again shortly",
            state.guest_logouts.window(),
        ));
    }
    let guest = state.accounts().log_out(&session.token).await?;
    let mut resp = if wants_json(&headers) {
        Json(json!({ "user": null })).into_response()
    } else {
        Redirect::to("/").into_response()
    };
    resp.extensions_mut().insert(NewToken(guest));
    Ok(resp)
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
    crate::session::cookie_value(headers, name).filter(|v| v.len() <= 100)
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

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    #[test]
    fn the_address_counted_is_the_peer_or_the_proxys_last_entry() {
        let peer = Some("10.0.0.9".parse().unwrap());
        let mut h = HeaderMap::new();
        h.insert(
            "x-forwarded-for",
            HeaderValue::from_static("6.6.6.6, 203.0.113.7"),
        );
        let text =
            |peer, h: &HeaderMap, trust| client_address(peer, h, trust).map(|a| a.to_string());
        assert_eq!(text(peer, &h, false).unwrap(), "10.0.0.9");
        assert_eq!(text(peer, &h, true).unwrap(), "203.0.113.7");
        h.insert("x-forwarded-for", HeaderValue::from_static("garbage"));
        assert_eq!(text(peer, &h, true).unwrap(), "10.0.0.9");
        assert_eq!(client_address(None, &HeaderMap::new(), true), None);
        let a = client_address(Some("2001:db8:1:2:aaaa::1".parse().unwrap()), &h, false);
        let b = client_address(Some("2001:db8:1:2:bbbb::9".parse().unwrap()), &h, false);
        assert_eq!(a, b);
        assert_eq!(a.unwrap().to_string(), "2001:db8:1:2::/64");
        let mapped = text(Some("::ffff:192.0.2.1".parse().unwrap()), &h, false);
        assert_eq!(mapped.unwrap(), "192.0.2.1");
    }
}
