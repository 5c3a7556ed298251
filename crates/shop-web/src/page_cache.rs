//! The shop's use of the page cache (`shop-page-cache`): which paths are its item
//! pages, who may skip the cache, and what its layers cache. The cache itself (the
//! store, the tower layer, the in-process tier) knows no route of the shop.

use std::convert::Infallible;
use std::task::{Context, Poll};

use axum::extract::Request;
use axum::response::Response;
use futures::future::{BoxFuture, Either};
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

/// Whether `req` has a `_` query parameter. Every visitor request is asked: the
/// query is parsed only if it could hold a `_` at all.
fn asks_bypass(req: &Request) -> bool {
    req.uri()
        .query()
        .filter(|q| q.contains('_'))
        .is_some_and(|q| PageRequest::new("", Some(q)).has_param("_"))
}

/// `req` marked [`CacheBypass`] when its session is an admin's.
async fn marked(state: &AppState, mut req: Request) -> Request {
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
    req
}

/// The shop's layer giving the book's `_` query parameter its meaning (a
/// dynamic request: skip the cache, [`CacheBypass`]) for admins only. Mounted
/// inside the session layer; a request with `_` from anyone else is served as if
/// `_` were absent (or `_` would be a free render per request). A request
/// without `_` (nearly all) goes to the service below as it is, with no
/// per-request box or clone of the service below or of the [`AppState`], as a
/// `from_fn_with_state` middleware makes.
#[derive(Clone)]
pub struct AdminBypassLayer(pub AppState);

impl<S> tower::Layer<S> for AdminBypassLayer {
    type Service = AdminBypass<S>;

    fn layer(&self, inner: S) -> AdminBypass<S> {
        AdminBypass {
            inner,
            state: self.0.clone(),
        }
    }
}

/// The service of [`AdminBypassLayer`].
#[derive(Clone)]
pub struct AdminBypass<S> {
    inner: S,
    state: AppState,
}

impl<S> tower::Service<Request> for AdminBypass<S>
where
    S: tower::Service<Request, Response = Response, Error = Infallible> + Clone + Send + 'static,
    S::Future: Send + 'static,
{
    type Response = Response;
    type Error = Infallible;
    type Future = Either<S::Future, BoxFuture<'static, Result<Response, Infallible>>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request) -> Self::Future {
        if !asks_bypass(&req) {
            return Either::Left(self.inner.call(req));
        }
        // The service made ready goes with the request; this one keeps a clone.
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let state = self.state.clone();
        Either::Right(Box::pin(async move {
            let req = marked(&state, req).await;
            inner.call(req).await
        }))
    }
}
