//! Logging in and out. Logging in checks the password against its argon2 hash, then
//! moves the session to a fresh token (a token planted before login is worthless
//! after it) keeping the cart and the viewed history. Logging out ends the session.

use std::collections::HashMap;

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::post;
use axum::{Form, Json, Router};
use serde_json::json;
use shop_cache::session::SessionToken;

use crate::AppState;
use crate::cart::wants_json;
use crate::error::WebError;
use crate::pages::safe_next;
use crate::session::{NewToken, Session};
use crate::views::{self, LoginPage};

/// Names and passwords longer than this are refused before any hashing.
const MAX_FIELD: usize = 200;

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
    headers: HeaderMap,
    Form(form): Form<HashMap<String, String>>,
) -> Result<Response, WebError> {
    let name = form.get("name").map(|s| s.trim()).unwrap_or("");
    let password = form.get("password").map(String::as_str).unwrap_or("");
    let next = safe_next(form.get("next").map(String::as_str));
    if name.is_empty()
        || password.is_empty()
        || name.len() > MAX_FIELD
        || password.len() > MAX_FIELD
    {
        return Err(WebError::bad_request("enter a name and a password"));
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
        };
        return Ok((StatusCode::UNAUTHORIZED, views::render(&page)?).into_response());
    };
    let token = state.sessions.login(&session.token, user).await?;
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
