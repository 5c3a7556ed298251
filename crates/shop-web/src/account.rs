//! `/account`: the logged-in user's name, orders and sessions (their devices,
//! each with a "log out" form: [`crate::devices`]); the login page otherwise.
//! After a checkout from the cart page (`?placed=ID`), it says the order is
//! placed, or (`&again=1`) that the form was sent before and nothing was
//! ordered now.

use axum::Router;
use std::collections::HashMap;

use axum::extract::{Query, State};
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::routing::get;

use crate::AppState;
use crate::error::WebError;
use crate::request::log_in_first;
use crate::session::Session;
use crate::templates::{self, AccountPage, OrderView, PlacedNotice};

/// The account page.
pub fn router(state: AppState) -> Router {
    Router::new()
        .route("/account", get(account))
        .with_state(state)
}

async fn account(
    State(state): State<AppState>,
    session: Session,
    headers: axum::http::HeaderMap,
    Query(query): Query<HashMap<String, String>>,
) -> Result<Response, WebError> {
    let Some(user) = session.known_user()? else {
        return Ok(log_in_first("/account", &headers));
    };
    let name = state.db.user_name(user).await?.unwrap_or_default();
    let orders = state.db.orders_of(user, 50).await?;
    let sessions = state.sessions.sessions_of(user).await?;
    // Said only of an order of this user's the page lists: a link cannot make
    // the page claim another.
    let placed = query
        .get("placed")
        .and_then(|id| id.parse::<i64>().ok())
        .filter(|id| orders.iter().any(|o| o.id == *id))
        .map(|id| PlacedNotice {
            id,
            again: query.contains_key("again"),
        });
    let page = AccountPage {
        name,
        placed,
        sessions: crate::devices::session_views(&sessions, &session.token),
        orders: orders
            .into_iter()
            .map(|o| OrderView {
                id: o.id,
                kind: o.kind,
                units: o.units,
                total: templates::money(o.total_cents),
            })
            .collect(),
    };
    Ok((
        [(header::CACHE_CONTROL, crate::PERSONAL)],
        templates::render(&page)?,
    )
        .into_response())
}
