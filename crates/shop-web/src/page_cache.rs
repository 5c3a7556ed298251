//! The shop's use of the page cache (`shop-page-cache`): which paths are its item
//! pages, who may skip the cache, and what its layers cache. The cache itself (the
//! store, the tower layer, the in-process tier) knows no route of the shop.

use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::Response;
use shop_cache::domain::ItemId;
pub use shop_page_cache::{
    CacheBypass, PageCacheConfig, PageCacheLayer, PageCacheStats, PageRequest, PageStore, PageTags,
    PageTier, Pages, TierFeed, X_CACHE, tier,
};

use crate::AppState;
use crate::session::Session;

/// The shop's item pages, `/items/{id}`, cached while the item is among the most
/// viewed.
pub const ITEMS: Pages = Pages::Ranked(item_path);

/// The shop's items' insights, `/api/items/{id}/insights` (asked for by every item
/// page): kept for the same items as their pages.
pub const INSIGHTS: Pages = Pages::Ranked(insights_path);

/// The item of a `/items/{id}` path with a valid id.
pub fn item_path(path: &str) -> Option<ItemId> {
    path.strip_prefix("/items/")?.parse().ok()
}

/// The item of a `/api/items/{id}/insights` path with a valid id.
pub fn insights_path(path: &str) -> Option<ItemId> {
    path.strip_prefix("/api/items/")?
        .strip_suffix("/insights")?
        .parse()
        .ok()
}

/// The shop's middleware giving the book's `_` query parameter its meaning (a
/// dynamic request: skip the cache, [`CacheBypass`]) for admins only. Mounted
/// inside the session layer; a request with `_` from anyone else is served as if
/// `_` were absent (or `_` would be a free render per request).
pub async fn admin_bypass(State(state): State<AppState>, mut req: Request, next: Next) -> Response {
    // Every visitor request passes here: the query is parsed only if it could
    // hold a `_` at all.
    let query = req.uri().query().filter(|q| q.contains('_'));
    if !query.is_some_and(|q| PageRequest::new("", Some(q)).has_param("_")) {
        return next.run(req).await;
    }
    // The session's user, or, where the session layer did not wait for it (an
    // item page's touch goes alongside the page), read here: one more round trip,
    // for `_` requests only.
    let session = req.extensions().get::<Session>().cloned();
    let user = match session {
        Some(Session {
            user: Some(user), ..
        }) => Some(user),
        Some(session) => state
            .sessions
            .check_token(&session.token)
            .await
            .ok()
            .flatten(),
        None => None,
    };
    if let Some(user) = user
        && matches!(state.db.is_admin(user).await, Ok(true))
    {
        req.extensions_mut().insert(CacheBypass);
    }
    next.run(req).await
}
