//! The catalogue's own pages: the home page (departments, the most viewed items)
//! and the item pages, behind the page cache.

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use shop_cache::domain::ItemId;

use crate::AppState;
use crate::error::{Cause, WebError};
use crate::page_cache::{self, PageCacheConfig};
use crate::request::{BadRequest, ItemPath};
use crate::templates::{self, CategoryLink, HomePage, ItemPage, ItemView};

/// How many items the home page lists.
const HOME_ITEMS: u64 = 24;

/// The home page and the item pages (behind the page cache).
pub fn router(state: AppState) -> Router {
    let item_cache = state.page_cache("item", PageCacheConfig::new(page_cache::ITEMS));
    let budget = axum::middleware::from_fn_with_state(state.clone(), crate::uncached::budget);
    Router::new()
        .route("/", get(home))
        .route("/items/{id}", get(item).layer(budget).layer(item_cache))
        .with_state(state)
}

async fn home(State(state): State<AppState>) -> Result<Response, WebError> {
    // The ranking lives in Redis; if it is unavailable, show the first items instead.
    let ids: Vec<ItemId> = match state.analytics.top(HOME_ITEMS).await {
        Ok(top) if !top.is_empty() => top.into_iter().map(|(id, _)| id).collect(),
        Ok(_) => Vec::new(),
        Err(error) => {
            Cause::redis(&error, "no view ranking; listing the first items").log();
            (1..=HOME_ITEMS)
                .filter_map(|n| ItemId::new(n).ok())
                .collect()
        }
    };
    let mut items = state.db.items(&ids).await?;
    items.retain(|item| !item.retired);
    let page = HomePage {
        items: items.iter().map(ItemView::from).collect(),
        categories: CategoryLink::all(&state.db.categories().await?),
    };
    Ok(templates::render(&page)?.into_response())
}

async fn item(
    State(state): State<AppState>,
    id: Result<ItemPath, BadRequest>,
) -> Result<Response, WebError> {
    // A path that names no item is a page that does not exist.
    let Ok(ItemPath(id)) = id else {
        return Err(WebError::not_found("there is no such item"));
    };
    let item = state
        .db
        .item(id)
        .await?
        .ok_or_else(|| WebError::not_found("there is no such item"))?;
    if item.retired {
        return Err(WebError::new(
            StatusCode::GONE,
            "retired",
            "this item is no longer sold",
        ));
    }
    // Its insights travel with it (the same for every visitor, cached and purged
    // with it); without them (Redis failing) the page's script asks for them.
    let (insights, tags) = match crate::insights::of(&state, id).await {
        Ok((insights, tags)) => (Some(crate::insights::inline_json(&insights)), Some(tags)),
        Err(error) => {
            error.log_cause("insights unavailable; the item page goes without them");
            (None, None)
        }
    };
    let page = ItemPage {
        item: ItemView::from(&item),
        category: item.category.clone(),
        description: item.description.clone(),
        max_quantity: state.carts.max_quantity(),
        insights,
    };
    let mut resp = templates::render(&page)?.into_response();
    if let Some(tags) = tags {
        resp.extensions_mut().insert(tags);
    }
    Ok(resp)
}
