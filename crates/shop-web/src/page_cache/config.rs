//! What a page-cache layer caches: which requests ([`Pages`]), what a page varies
//! on, how long a request waits for another's render, and who may skip the cache.

use super::*;

/// Which requests a layer may cache.
#[derive(Debug, Clone, Copy)]
pub enum Pages {
    /// Pages of single items, while the item is among the most viewed (the book's
    /// `can_cache`): the function names the item a path shows, or `None` for a
    /// path that is no item page (not cached). The shop's is [`item_path`].
    Ranked(fn(&str) -> Option<ItemId>),
    /// Any page: for pages that are the same for every visitor and always popular
    /// (the flash-sale shell, listings).
    Shared,
}

impl Pages {
    /// The shop's item pages, `/items/{id}`.
    pub const ITEMS: Self = Self::Ranked(item_path);
    /// The shop's items' insights, `/api/items/{id}/insights` (asked for by every
    /// item page): kept for the same items as their pages.
    pub const INSIGHTS: Self = Self::Ranked(insights_path);
}

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

/// How a [`PageCacheLayer`] behaves.
#[derive(Debug, Clone)]
pub struct PageCacheConfig {
    /// Which requests qualify.
    pub pages: Pages,
    /// Request headers the pages vary on: each value is part of the key.
    pub vary: Vec<HeaderName>,
    /// Query parameters the pages read: only these are part of the key. Others are
    /// ignored (the page is the same with or without them), so random parameters
    /// cannot bust the cache. Ignored rather than passed through uncached: passing
    /// them through would let any client skip the cache, and its stampede
    /// protection, by adding `?r=<random>`.
    pub params: Vec<&'static str>,
    /// The longest a request waits for another's render before rendering itself.
    pub wait: Duration,
    /// How often a request polls Redis for a page another process is rendering.
    pub poll: Duration,
    /// Pages larger than this (or of unknown size) are served but not stored.
    pub max_body: usize,
}

/// On a request: skip the page cache (render, do not store). The app decides who
/// may; the shop sets it for an admin's request with the book's `_` query
/// parameter ([`admin_bypass`]).
#[derive(Debug, Clone, Copy)]
pub struct CacheBypass;

/// The shop's middleware giving the book's `_` query parameter its meaning (a
/// dynamic request: skip the cache) for admins only. Mounted inside the session
/// layer; a request with `_` from anyone else is served as if `_` were absent.
pub async fn admin_bypass(
    axum::extract::State(state): axum::extract::State<crate::AppState>,
    mut req: Request,
    next: axum::middleware::Next,
) -> Response {
    // Every visitor request passes here: the query is parsed only if it could
    // hold a `_` at all.
    let query = req.uri().query().filter(|q| q.contains('_'));
    if !query.is_some_and(|q| PageRequest::new("", Some(q)).has_param("_")) {
        return next.run(req).await;
    }
    // The session's user, or, where the session layer did not wait for it (an
    // item page's touch goes alongside the page), read here: one more round trip,
    // for `_` requests only.
    let session = req.extensions().get::<crate::session::Session>().cloned();
    let user = match session {
        Some(crate::session::Session {
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

impl Default for PageCacheConfig {
    fn default() -> Self {
        Self {
            pages: Pages::ITEMS,
            vary: Vec::new(),
            params: Vec::new(),
            wait: Duration::from_secs(2),
            poll: Duration::from_millis(20),
            max_body: 4 << 20,
        }
    }
}
