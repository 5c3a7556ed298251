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

/// How many of the most viewed items the home page shows.
const MOST_VIEWED: u64 = 12;

/// How many featured items the home page shows (a few of every department).
const FEATURED: u32 = 16;

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
    // The ranking lives in Redis; if it is unavailable, the page goes without it.
    let ids: Vec<ItemId> = match state.analytics.top(MOST_VIEWED).await {
        Ok(top) => top.into_iter().map(|(id, _)| id).collect(),
        Err(error) => {
            Cause::redis(
                &error,
                "no view ranking; the home page shows featured items only",
            )
            .log();
            Vec::new()
        }
    };
    let mut most_viewed = state.db.items(&ids).await?;
    most_viewed.retain(|item| !item.retired);
    // A few of every department (its first items), so even a new shop, where
    // nothing has been viewed yet, opens on products.
    let categories = state.db.categories().await?;
    let each = FEATURED
        .div_ceil(categories.len().max(1) as u32)
        .clamp(1, 4);
    let mut featured = Vec::new();
    for category in categories.iter().take(FEATURED as usize) {
        featured.extend(state.db.items_page(Some(category), None, each).await?);
    }
    featured.retain(|item| !most_viewed.iter().any(|seen| seen.id == item.id));
    featured.truncate(FEATURED as usize);
    let page = HomePage {
        most_viewed: most_viewed.iter().map(ItemView::from).collect(),
        featured: featured.iter().map(ItemView::from).collect(),
        categories: CategoryLink::all(&categories),
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
    // Out of stock only when its inventory says so (a flash sale sold it out).
    let in_stock = state
        .db
        .inventory_row(id)
        .await?
        .is_none_or(|row| row.stock > 0);
    let page = ItemPage {
        item: ItemView::from(&item),
        category_href: CategoryLink::all(std::slice::from_ref(&item.category))
            .pop()
            .map(|link| link.href)
            .unwrap_or_default(),
        category: item.category.clone(),
        description: item.description.clone(),
        max_quantity: state.carts.max_quantity(),
        stock: if in_stock { "In stock" } else { "Out of stock" },
        stock_class: if in_stock { "in-stock" } else { "out-of-stock" },
        picture_size: crate::pictures::SIZE,
        insights,
    };
    let mut resp = templates::render(&page)?.into_response();
    if let Some(tags) = tags {
        resp.extensions_mut().insert(tags);
    }
    Ok(resp)
}
