//! `GET /api/items/{id}/insights`, for the item page's script: viewed-then-bought
//! (over the current week and the one before, stated in the answer's `window`;
//! as the page's sentence in `viewed_then_bought_text`, null until the item has
//! `--insights-min-viewers` distinct viewers) and also-bought (see
//! `shop_cache::insights`). Viewers are sessions that returned their cookie and do
//! not call themselves bots (see `crate::session`).

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use serde_json::json;

use crate::AppState;
use crate::error::WebError;
use crate::request::ItemPath;
use shop_cache::domain::ItemId;

/// `/api/items/{id}/insights`.
pub fn router(state: AppState) -> Router {
    Router::new()
        .route("/api/items/{id}/insights", get(insights))
        .with_state(state)
}

async fn insights(
    State(state): State<AppState>,
    ItemPath(id): ItemPath,
) -> Result<Response, WebError> {
    if state.db.item(id).await?.is_none() {
        return Err(WebError::not_found("there is no such item"));
    }
    let found = state.insights.get(id).await?;
    let ids: Vec<ItemId> = found.also_bought.iter().map(|(id, _)| *id).collect();
    let items = state.db.items_by_id(&ids).await?;
    let also: Vec<_> = found
        .also_bought
        .iter()
        .filter_map(|(id, score)| {
            let item = items.get(id)?;
            Some(json!({ "id": id.get(), "title": item.title, "score": score }))
        })
        .collect();
    let body = json!({
        "item": id.get(),
        "viewers": found.viewers,
        "buyers": found.buyers,
        "viewed_then_bought_percent": (found.viewed_then_bought_percent() * 10.0).round() / 10.0,
        // What the item page shows: the figure with its evidence, or nothing
        // below the minimum of viewers.
        "viewed_then_bought_text": found.viewed_then_bought(state.config.insights_min_viewers),
        "min_viewers": state.config.insights_min_viewers,
        // The window the two counts cover (see shop_cache::insights).
        "window": shop_cache::insights::WINDOW_TEXT,
        "also_bought": also,
    });
    Ok(Json(body).into_response())
}
