//! The HTML pages that are not about the cart or logging in: home, item, account.

use axum::Router;
use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use shop_cache::domain::ItemId;

use crate::AppState;
use crate::error::WebError;
use crate::page_cache::{PageCacheConfig, PageCacheLayer};
use crate::request::{BadRequest, ItemPath, log_in_first};
use crate::session::Session;
use crate::views::{self, AccountPage, CategoryLink, HomePage, ItemPage, ItemView, OrderView};

/// How many items the home page lists.
const HOME_ITEMS: u64 = 24;

/// The page routes; item pages behind the page cache.
pub fn router(state: AppState) -> Router {
    let item_cache = PageCacheLayer::new(state.pages.clone(), PageCacheConfig::default());
    state
        .metrics
        .register_page_cache("item", item_cache.stats());
    Router::new()
        .route("/", get(home))
        .route("/items/{id}", get(item).layer(item_cache))
        .route("/account", get(account))
        .with_state(state)
}

async fn home(State(state): State<AppState>) -> Result<Response, WebError> {
    // The ranking lives in Redis; if it is unavailable, show the first items instead.
    let ids: Vec<ItemId> = match state.analytics.top(HOME_ITEMS).await {
        Ok(top) if !top.is_empty() => top.into_iter().map(|(id, _)| id).collect(),
        Ok(_) => Vec::new(),
        Err(error) => {
            tracing::warn!(%error, "no view ranking; listing the first items");
            (1..=HOME_ITEMS)
                .filter_map(|n| ItemId::new(n).ok())
                .collect()
        }
    };
    let items = state.db.items(&ids).await?;
    let page = HomePage {
        items: items.iter().map(ItemView::from).collect(),
        categories: CategoryLink::all(&state.db.categories().await?),
    };
    Ok(views::render(&page)?.into_response())
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
    let page = ItemPage {
        item: ItemView::from(&item),
        category: item.category.clone(),
        description: item.description.clone(),
        max_quantity: state.carts.max_quantity(),
    };
    Ok(views::render(&page)?.into_response())
}

async fn account(State(state): State<AppState>, session: Session) -> Result<Response, WebError> {
    let Some(user) = session.user else {
        return Ok(log_in_first("/account"));
    };
    let name = state.db.user_name(user).await?.unwrap_or_default();
    let orders = state.db.orders_of(user, 50).await?;
    let page = AccountPage {
        name,
        orders: orders
            .into_iter()
            .map(|o| OrderView {
                id: o.id,
                kind: o.kind,
                units: o.units,
                total: views::money(o.total_cents),
            })
            .collect(),
    };
    Ok(([(header::CACHE_CONTROL, "no-store")], views::render(&page)?).into_response())
}
