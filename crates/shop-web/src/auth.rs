//! Logging in and out. Logging in checks the password against its argon2 hash, then
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

use axum::extract::{ConnectInfo, FromRequestParts, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::post;
use axum::{Form, Json, Router};
use serde_json::json;
use shop_cache::login_limit::Attempt;
use shop_cache::session::SessionToken;

use crate::AppState;
use crate::cart::wants_json;
use crate::error::{WebError, idempotency_key};
use crate::pages::local_path;
use crate::session::{NewToken, Session};
use crate::views::{self, LoginPage};

/// Names and passwords longer than this are refused before any hashing.
const MAX_FIELD: usize = 200;

/// The client's address, when the server recorded it (`ConnectInfo`); `None` when
/// the router is driven without a socket (tests). Behind a reverse proxy this is the
/// proxy's address: the per-address limit then applies to the proxy as a whole, and
/// the per-name limit still protects each account.
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

/// The login and logout routes.
pub fn router(state: AppState) -> Router {
    Router::new()
        .route("/login", post(login))
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
    let name = form.get("name").map(|s| s.trim()).unwrap_or("");
    let password = form.get("password").map(String::as_str).unwrap_or("");
    let next = local_path(form.get("next").map(String::as_str))?;
    if name.is_empty()
        || password.is_empty()
        || name.len() > MAX_FIELD
        || password.len() > MAX_FIELD
    {
        return Err(WebError::bad_request("enter a name and a password"));
    }
    let once = match form
        .get("key")
        .map(String::as_str)
        .or_else(|| headers.get("idempotency-key").and_then(|v| v.to_str().ok()))
    {
        Some(raw) => Some(idempotency_key(Some(raw))?),
        None => None,
    };
    let address = peer.map(|ip| ip.to_string());
    if let Attempt::Refused { retry_after } = state
        .login_limiter
        .attempt(address.as_deref(), name)
        .await?
    {
        return Err(WebError::too_many_requests(
            "too many login attempts; wait a minute and try again",
            retry_after,
        ));
    }
    let Some(user) = state.db.check_password(name, password).await? else {
        if wants_json(&headers) {
            return Err(WebError::new(
                StatusCode::UNAUTHORIZED,
                "bad_login",
                "wrong name or password",
            ));
        }
        let page = LoginPage {
            next,
            message: Some("Wrong name or password.".to_owned()),
            key: SessionToken::generate().expose().to_owned(),
        };
        return Ok((StatusCode::UNAUTHORIZED, views::render(&page)?).into_response());
    };
    let token = state.sessions.login(&session.token, user, once).await?;
    let mut resp = if wants_json(&headers) {
        Json(json!({ "user": user.get() })).into_response()
    } else {
        Redirect::to(&next).into_response()
    };
    resp.extensions_mut().insert(NewToken(token));
    Ok(resp)
}

async fn logout(
    State(state): State<AppState>,
    session: Session,
    headers: HeaderMap,
) -> Result<Response, WebError> {
    state.sessions.logout(&session.token).await?;
    let guest = SessionToken::generate();
    state.sessions.touch(&guest, None, None).await?;
    let mut resp = if wants_json(&headers) {
        Json(json!({ "user": null })).into_response()
    } else {
        Redirect::to("/").into_response()
    };
    resp.extensions_mut().insert(NewToken(guest));
    Ok(resp)
}
