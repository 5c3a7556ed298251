//! `GET /api/items/{id}/insights`, for the item page's script (every view of an
//! item page calls it): viewed-then-bought
//! (over the current week and the one before, stated in the answer's `window`;
//! as the page's sentence in `viewed_then_bought_text`, null until the item has
//! `--insights-min-viewers` distinct viewers) and also-bought (ranked by how much
//! more often bought together than popularity predicts, past
//! `--insights-min-co-buyers` orders, without retired items: see
//! `shop_cache::insights`; the page's script leaves out the shopper's cart). Viewers are sessions that returned their cookie and do
//! not call themselves bots (see `crate::session`).
//!
//! The item page carries the same answer inline (a `<script type="application/json"
//! id="insights-data">`, read by its script), so a page view makes no call here: the
//! page and its insights are cached, tagged and purged together. The call stays
//! for other clients, and for a page rendered while the insights could not be read.
//!
//! The answer is the same for everyone, so it is served through the page cache
//! (Redis and each server's in-process tier) for the same items as their pages
//! (those ranked in `viewed:`, [`crate::page_cache::INSIGHTS`]): a view's call costs no
//! database read and no insights lookup while its answer is cached. It is tagged
//! with its item and the items it recommends, so a change to any of them (a new
//! title, a retirement) purges it; the counts and the list follow new views and
//! orders within the page TTL and its serve-stale window (5 minutes and one more
//! by default, `--page-ttl`, `--page-stale-while-revalidate`).

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use serde_json::json;

use crate::AppState;
use crate::error::WebError;
use crate::page_cache::{self, PageCacheConfig, PageTags};
use crate::request::ItemPath;
use shop_app::page_tags;
use shop_cache::domain::ItemId;

/// `/api/items/{id}/insights`, behind the page cache.
pub fn router(state: AppState) -> Router {
    let cache = state.page_cache("insights", PageCacheConfig::new(page_cache::INSIGHTS));
    let budget = axum::middleware::from_fn_with_state(state.clone(), crate::uncached::budget);
    Router::new()
        .route(
            "/api/items/{id}/insights",
            get(insights).layer(budget).layer(cache),
        )
        .with_state(state)
}

async fn insights(
    State(state): State<AppState>,
    ItemPath(id): ItemPath,
) -> Result<Response, WebError> {
    match state.db.item(id).await? {
        None => return Err(WebError::not_found("there is no such item")),
        // As its page: gone, not insights of an item nobody can buy.
        Some(item) if item.retired => return Err(WebError::retired()),
        Some(_) => {}
    }
    let (body, tags) = of(&state, id).await?;
    // Purged when an item it recommends changes (the page cache tags it with its
    // own item, as an item page).
    let mut resp = Json(body).into_response();
    resp.extensions_mut().insert(tags);
    Ok(resp)
}

/// The insights of item `id` (an item that exists) as `/api/items/{id}/insights`
/// answers them, and the tags of the items they recommend (whose change must
/// purge them). The item page carries the same inline.
pub(crate) async fn of(
    state: &AppState,
    id: ItemId,
) -> Result<(serde_json::Value, PageTags), WebError> {
    let found = state.insights.get(id).await?;
    let ids: Vec<ItemId> = found.also_bought.iter().map(|a| a.item).collect();
    let items = state.db.items_by_id(&ids).await?;
    // Never an item that is gone or retired (it cannot be bought).
    let also: Vec<_> = found
        .also_bought
        .iter()
        .filter_map(|a| {
            let item = items.get(&a.item).filter(|item| !item.retired)?;
            Some(json!({
                "id": a.item.get(),
                "title": item.title,
                "score": (a.score * 100.0).round() / 100.0,
                "co_buyers": (a.co_buyers * 10.0).round() / 10.0,
            }))
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
        // Best first, up to ALSO_BOUGHT_OFFERED: a page leaves out what is already
        // in the shopper's cart (from /api/me) and shows the first ALSO_BOUGHT_SHOWN.
        "also_bought": also,
        "also_bought_shown": shop_cache::insights::ALSO_BOUGHT_SHOWN,
        "min_co_buyers": state.config.insights_min_co_buyers,
    });
    Ok((
        body,
        PageTags(ids.into_iter().map(page_tags::item).collect()),
    ))
}

/// `value` as the text of a `<script type="application/json">` block: JSON whose
/// `<` (only ever inside its strings) is written `\u003c`, so no title can close
/// the block.
pub fn inline_json(value: &serde_json::Value) -> String {
    value.to_string().replace('<', "\\u003c")
}
