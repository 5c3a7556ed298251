//! `GET /api/me`: the per-user parts of every page (who is logged in, the cart,
//! recently viewed items), for the pages' scripts, so page HTML can be shared and
//! cached.

use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use serde_json::json;

use crate::AppState;
use crate::error::WebError;
use crate::session::Session;
use crate::templates::ItemView;

/// `/api/me`.
pub fn router(state: AppState) -> Router {
    Router::new().route("/api/me", get(me)).with_state(state)
}

async fn me(State(state): State<AppState>, session: Session) -> Result<Response, WebError> {
    let user = match session.user {
        Some(id) => state
            .db
            .user_name(id)
            .await?
            .map(|name| json!({ "id": id.get(), "name": name })),
        None => None,
    };
    let cart = state.carts.get(&session.token).await?;
    let count: u32 = cart.iter().map(|(_, q)| q.get()).sum();
    let lines: Vec<_> = cart
        .iter()
        .map(|(id, q)| json!({ "item": id.get(), "quantity": q.get() }))
        .collect();
    let viewed = state.sessions.recently_viewed(&session.token).await?;
    let recent: Vec<ItemView> = state
        .db
        .items(&viewed)
        .await?
        .iter()
        .map(ItemView::from)
        .collect();
    let body = json!({
        "user": user,
        "cart": { "count": count, "lines": lines },
        "recently_viewed": recent,
    });
    Ok(([(header::CACHE_CONTROL, "no-store")], Json(body)).into_response())
}
