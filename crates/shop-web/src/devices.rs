//! A shopper's sessions (their devices): the list, ending one or all the others,
//! and changing the password (which ends the others too).
//!
//! - `GET /api/me/sessions`: the logged-in user's sessions, most recently seen
//!   first, each by an opaque id (a hash of the token, never the token), with when
//!   it logged in and was last seen, its browser and system (from the User-Agent)
//!   and its network (a /24 or /48), and which one is asking. The account page
//!   shows the same list, with a form per device.
//! - `POST /api/me/sessions/{id}/end`: ends that session exactly as logout does
//!   (its login and history; the account's cart stays); its next request is a logged-out visitor's.
//!   Ending the session asking is a logout (a new cookie). 404 for an id that is
//!   not one of the user's sessions.
//! - `POST /api/me/sessions/end-others`: "log out everywhere else".
//! - `GET`/`POST /account/password`: the current password (checked on the same
//!   bounded hashing pool as logins, and counted against the login limits; a
//!   wrong one is 403), the new one (the sign-up rules); every other session
//!   ends, a login racing the change included, and the session asking moves to a
//!   new token (a new cookie).
//!
//! A form post answers with a redirect (back to `/account`), the same post with
//! `Accept: application/json` with JSON. Every route needs a logged-in user: 401
//! (JSON) or the login page otherwise. What keeps the list exact:
//! [`shop_cache::session::user_sessions`].

use std::collections::HashMap;

use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use axum::{Form, Json, Router};
use serde_json::json;
use shop_app::accounts::{PasswordChange, PasswordChanged};
use shop_cache::domain::account::check_new_password;
use shop_cache::session::{SessionToken, UserSession, session_id};

use crate::AppState;
use crate::auth::{Client, PeerAddr};
use crate::error::WebError;
use crate::request::{log_in_first, wants_json};
use crate::session::{NewToken, Session};
use crate::templates::{self, PasswordPage, SessionView};

/// Passwords longer than this are refused before any hashing (as at login).
const MAX_FIELD: usize = 200;

/// What a user is told when their password changed but their other sessions
/// could not all be ended (Redis failing).
const LEFT_LOGGED_IN: &str = "Your password is changed, but your other devices could not all be \
     logged out just now: use \"Log out everywhere else\" on your account page.";

/// The routes.
pub fn router(state: AppState) -> Router {
    Router::new()
        .route("/api/me/sessions", get(list))
        .route("/api/me/sessions/end-others", post(end_others))
        .route("/api/me/sessions/{id}/end", post(end_one))
        .route(
            "/account/password",
            get(password_form).post(change_password),
        )
        .with_state(state)
}

/// A short "Browser on System" from a User-Agent, for people to recognise their
/// devices by; never parsed for anything else.
pub fn describe_agent(agent: &str) -> String {
    let has = |s: &str| agent.contains(s);
    let browser = if agent.trim().is_empty() {
        "Unknown browser"
    } else if has("Edg/") {
        "Edge"
    } else if has("OPR/") {
        "Opera"
    } else if has("Firefox/") {
        "Firefox"
    } else if has("Chrome/") || has("Chromium/") {
        "Chrome"
    } else if has("Safari/") {
        "Safari"
    } else if has("curl/") {
        "curl"
    } else {
        "Another browser"
    };
    let system = if has("Android") {
        "Android"
    } else if has("iPhone") || has("iPad") {
        "iOS"
    } else if has("Windows") {
        "Windows"
    } else if has("CrOS") {
        "ChromeOS"
    } else if has("Mac OS X") || has("Macintosh") {
        "macOS"
    } else if has("Linux") {
        "Linux"
    } else {
        return browser.to_owned();
    };
    format!("{browser} on {system}")
}

/// How long ago `then` was, as a person says it.
fn ago(now: f64, then: f64) -> String {
    let secs = (now - then).max(0.0) as u64;
    match secs {
        0..60 => "just now".to_owned(),
        60..3_600 => format!("{} min ago", secs / 60),
        3_600..86_400 => format!("{} h ago", secs / 3_600),
        _ => format!("{} days ago", secs / 86_400),
    }
}

/// The account page's rows for `sessions`, `current` marked.
pub fn session_views(sessions: &[UserSession], current: &SessionToken) -> Vec<SessionView> {
    let now = shop_db::unix_now() as f64;
    sessions
        .iter()
        .map(|s| SessionView {
            id: s.id.clone(),
            device: describe_agent(&s.device.user_agent),
            network: s.device.network.clone(),
            created: ago(now, s.created),
            last_seen: ago(now, s.last_seen),
            current: s.is(current),
        })
        .collect()
}

async fn list(State(state): State<AppState>, session: Session) -> Result<Response, WebError> {
    let user = session.require_user()?;
    let sessions = state.sessions.sessions_of(user).await?;
    let list: Vec<_> = sessions
        .iter()
        .map(|s| {
            json!({
                "id": s.id,
                "created": s.created as u64,
                "last_seen": s.last_seen as u64,
                "device": describe_agent(&s.device.user_agent),
                "network": s.device.network,
                "current": s.is(&session.token),
            })
        })
        .collect();
    Ok((
        [(header::CACHE_CONTROL, crate::PERSONAL)],
        Json(json!({ "sessions": list })),
    )
        .into_response())
}

async fn end_one(
    State(state): State<AppState>,
    session: Session,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Result<Response, WebError> {
    let Some(user) = session.known_user()? else {
        return Ok(log_in_first("/account", &headers));
    };
    // Ids are 24 hex characters; anything else is no session of anyone's.
    if id.len() != 24 || !id.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(WebError::not_found("there is no such session"));
    }
    if id == session_id(&session.token) {
        // This very session: a logout, with a new cookie.
        let fresh = state.accounts().log_out(&session.token).await?;
        let mut resp = done(&headers, json!({ "ended": true, "current": true }), "/");
        resp.extensions_mut().insert(NewToken(fresh));
        return Ok(resp);
    }
    if !state.sessions.end_session(user, &id).await? {
        return Err(WebError::not_found("there is no such session"));
    }
    Ok(done(&headers, json!({ "ended": true }), "/account"))
}

async fn end_others(
    State(state): State<AppState>,
    session: Session,
    headers: HeaderMap,
) -> Result<Response, WebError> {
    let Some(user) = session.known_user()? else {
        return Ok(log_in_first("/account", &headers));
    };
    let ended = state
        .sessions
        .end_others(user, Some(&session.token))
        .await?;
    Ok(done(&headers, json!({ "ended": ended }), "/account"))
}

/// A post's answer: JSON when asked for, else a redirect to `back`.
fn done(headers: &HeaderMap, body: serde_json::Value, back: &str) -> Response {
    if wants_json(headers) {
        Json(body).into_response()
    } else {
        Redirect::to(back).into_response()
    }
}

async fn password_form(session: Session, headers: HeaderMap) -> Result<Response, WebError> {
    if session.known_user()?.is_none() {
        return Ok(log_in_first("/account/password", &headers));
    }
    Ok((
        [(header::CACHE_CONTROL, crate::PERSONAL)],
        templates::render(&PasswordPage { message: None })?,
    )
        .into_response())
}

async fn change_password(
    State(state): State<AppState>,
    session: Session,
    PeerAddr(peer): PeerAddr,
    headers: HeaderMap,
    Form(form): Form<HashMap<String, String>>,
) -> Result<Response, WebError> {
    let Some(user) = session.known_user()? else {
        return Ok(log_in_first("/account", &headers));
    };
    let refuse = |status: StatusCode, code: &'static str, message: &str| {
        if wants_json(&headers) {
            return Err(WebError::new(status, code, message.to_owned()));
        }
        let page = PasswordPage {
            message: Some(message.to_owned()),
        };
        Ok((status, templates::render(&page)?).into_response())
    };
    let current = form.get("current").map(String::as_str).unwrap_or("");
    let new = form.get("new").map(String::as_str).unwrap_or("");
    if current.is_empty() || current.len() > MAX_FIELD {
        return refuse(
            StatusCode::BAD_REQUEST,
            "bad_request",
            "Enter your current password.",
        );
    }
    if new == current {
        // Not a change: it would log every other device out for nothing.
        return refuse(
            StatusCode::BAD_REQUEST,
            "bad_request",
            "The new password is the one you have: choose another.",
        );
    }
    if let Err(invalid) = check_new_password(new) {
        return refuse(StatusCode::BAD_REQUEST, "bad_request", &invalid.to_string());
    }
    let client = Client::of(&state, &headers, &session, peer);
    let change = PasswordChange {
        user,
        session: &session.token,
        address: client.address.as_ref(),
        device: client.device.as_deref(),
        current,
        new,
        from: &client.from,
    };
    match state.accounts().change_password(change).await? {
        PasswordChanged::Changed { ended, token } => {
            let mut resp = match ended {
                Some(ended) => done(
                    &headers,
                    json!({ "changed": true, "ended": ended }),
                    "/account",
                ),
                // Changed, but the other devices could not all be logged out: the
                // user is told, and can do it from the account page.
                None if wants_json(&headers) => Json(json!({
                    "changed": true,
                    "ended": null,
                    "message": LEFT_LOGGED_IN,
                }))
                .into_response(),
                None => templates::render(&PasswordPage {
                    message: Some(LEFT_LOGGED_IN.to_owned()),
                })?
                .into_response(),
            };
            if let Some(token) = token {
                resp.extensions_mut().insert(NewToken(token));
            }
            Ok(resp)
        }
        // 403, not 401: the user is logged in; the password they gave is wrong.
        PasswordChanged::WrongPassword => refuse(
            StatusCode::FORBIDDEN,
            "bad_password",
            "That is not your current password.",
        ),
        PasswordChanged::TooMany { retry_after } => Err(crate::auth::too_many(retry_after)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn agents_are_described_briefly() {
        let cases = [
            (
                "Mozilla/5.0 (X11; Linux x86_64; rv:128.0) Gecko/20100101 Firefox/128.0",
                "Firefox on Linux",
            ),
            (
                "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/126.0 Safari/537.36 Edg/126.0",
                "Edge on Windows",
            ),
            (
                "Mozilla/5.0 (iPhone; CPU iPhone OS 17_5 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.5 Mobile/15E148 Safari/604.1",
                "Safari on iOS",
            ),
            (
                "Mozilla/5.0 (Linux; Android 14) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/126.0 Mobile Safari/537.36",
                "Chrome on Android",
            ),
            ("curl/8.5.0", "curl"),
            ("", "Unknown browser"),
        ];
        for (agent, said) in cases {
            assert_eq!(describe_agent(agent), said, "{agent}");
        }
    }

    #[test]
    fn times_read_as_ago() {
        assert_eq!(ago(1_000.0, 990.0), "just now");
        assert_eq!(ago(10_000.0, 10_000.0 - 180.0), "3 min ago");
        assert_eq!(ago(100_000.0, 100_000.0 - 7_200.0), "2 h ago");
        assert_eq!(ago(1e6, 1e6 - 3.0 * 86_400.0), "3 days ago");
    }
}
