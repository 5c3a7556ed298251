//! `/account`: the logged-in user's name, orders and sessions (their devices,
//! each with a "log out" form: [`crate::devices`]); the login page otherwise.

use axum::Router;
use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::routing::get;

use crate::AppState;
use crate::error::WebError;
use crate::request::log_in_first;
use crate::session::Session;
use crate::templates::{self, AccountPage, OrderView};

/// The account page.
pub fn router(state: AppState) -> Router {
    Router::new()
        .route("/account", get(account))
        .with_state(state)
}

async fn account(State(state): State<AppState>, session: Session) -> Result<Response, WebError> {
    let Some(user) = session.known_user()? else {
        return Ok(log_in_first("/account"));
    };
    let name = state.db.user_name(user).await?.unwrap_or_default();
    let orders = state.db.orders_of(user, 50).await?;
    let sessions = state.sessions.sessions_of(user).await?;
    let page = AccountPage {
        name,
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
