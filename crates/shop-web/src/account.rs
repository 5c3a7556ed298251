//! `/account`: the logged-in user's name, orders and sessions (their devices,
//! each with a "log out" form: [`crate::devices`]); the login page otherwise.
//! After a checkout from the cart page (`?placed=ID`), it says the order is
//! placed, or (`&again=1`) that the form was sent before and nothing was
//! ordered now. `/account/orders/{id}`: one of the user's orders line by line
//! (item, units, the price charged for each), as a page or as JSON; another
//! user's order is 404, as one that does not exist.

use axum::Router;
use std::collections::HashMap;

use axum::extract::{Query, State};
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::routing::get;

use crate::AppState;
use crate::error::WebError;
use crate::request::{log_in_first, wants_json};
use crate::session::Session;
use crate::templates::{self, AccountPage, OrderLineView, OrderPage, OrderView, PlacedNotice};

/// The account page.
pub fn router(state: AppState) -> Router {
    Router::new()
        .route("/account", get(account))
        .route("/account/orders/{id}", get(order))
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

async fn order(
    State(state): State<AppState>,
    session: Session,
    headers: axum::http::HeaderMap,
    axum::extract::Path(id): axum::extract::Path<String>,
) -> Result<Response, WebError> {
    let no_such = || WebError::not_found("there is no such order of yours");
    // An order id as the account page links it: digits, no sign, no zero first.
    let id: i64 = match id.parse::<i64>() {
        Ok(n) if n > 0 && n.to_string() == id => n,
        _ => return Err(no_such()),
    };
    let Some(user) = session.known_user()? else {
        return Ok(log_in_first(&format!("/account/orders/{id}"), &headers));
    };
    let Some(order) = state.db.order_of(user, id).await? else {
        return Err(no_such());
    };
    let personal = [(header::CACHE_CONTROL, crate::PERSONAL)];
    if wants_json(&headers) {
        return Ok((personal, axum::Json(order)).into_response());
    }
    let name = state.user_names.name(&state.db, user).await?;
    let page = OrderPage {
        name: name.map(|name| name.to_string()).unwrap_or_default(),
        id: order.summary.id,
        kind: order.summary.kind,
        placed: shop_cache::domain::when::Utc(order.summary.created_at).to_string(),
        units: order.summary.units,
        total: templates::money(order.summary.total_cents),
        lines: order
            .lines
            .into_iter()
            .map(|line| OrderLineView {
                item: line.item.get(),
                title: line.title,
                quantity: line.quantity,
                price: templates::money(line.price_cents),
                line_total: templates::money(line.price_cents.saturating_mul(line.quantity)),
            })
            .collect(),
    };
    Ok((personal, templates::render(&page)?).into_response())
}
