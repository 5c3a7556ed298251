//! The page-cache tower layer: serves popular pages from Redis without calling the
//! handler, stores the pages it renders, and makes sure a page that is missing is
//! rendered once however many requests want it at the same moment.
//!
//! Which requests qualify (the book's `can_cache`, stricter):
//! - `GET` or `HEAD`, without an `Authorization` header, without a
//!   [`CacheBypass`] extension (the book's `_` query parameter marks a dynamic
//!   request: the app decides whose `_` counts and sets the extension for them,
//!   the shop for admins only; for anyone else `_` is an ignored parameter, or it
//!   would be a free render per request);
//! - the key covers the path, the query parameters the page reads
//!   ([`PageCacheConfig::params`], none by default) and the headers it varies on:
//!   other parameters cannot change the page, so they do not make a new entry;
//! - for [`Pages::Ranked`], only paths its function maps to an item (the app's
//!   item pages, such as `/items/{id}` with a valid id) whose item passes the
//!   store's gate ([`PageStore::ranked`]: with the shop's limit, rank 9,999 is
//!   cached, 10,000 is not, no views is not); for [`Pages::Shared`] (pages the
//!   same for everyone, like a flash-sale shell or a listing) any path.
//!
//! Which responses are stored: status 200, no `Set-Cookie`, no `Cache-Control` of
//! `private`, `no-store` or `no-cache`, not already content-encoded, of known size.
//!
//! Every response says what happened in `X-Cache`: `HIT` (from Redis, or from the
//! render another request of this process was doing), `STALE` (past its TTL, see
//! below), `MISS` (rendered here) or `BYPASS` (not a cacheable request, or Redis
//! unavailable). A matching `If-None-Match` gets `304 Not Modified`, for a page
//! rendered and not kept (not popular enough) too. Bodies are stored gzip-compressed
//! and sent as stored to clients that accept gzip, decompressed for the others.
//!
//! Stampedes: misses of the same key in one process wait for the first one's render
//! (single-flight); across processes the first takes a short Redis lock and the
//! others poll Redis for its page. Nobody waits longer than
//! [`PageCacheConfig::wait`]: after that, or if the render turns out not storable,
//! a waiter renders the page itself.
//!
//! If Redis fails, the layer calls the handler and returns its page: the cache can
//! make the shop faster, never unavailable.
//!
//! Serve-stale (with a store that keeps pages past their TTL,
//! [`PageStore::with_stale`]): a page expired less than `while_revalidate` ago is
//! served as it is (`X-Cache: STALE`) while one request renders it in the
//! background (this process's single flight, then the Redis render lock, so one
//! render across every web server); a page expired longer ago is rendered, and if
//! the render fails (5xx: the database unreachable or locked) the stale copy is
//! served instead, up to `if_error` after its TTL. A purged page is never served
//! stale.
//!
//! Purges: a handler names what its page shows by a [`PageTags`] extension on its
//! response (an item page of [`Pages::Ranked`] is tagged with its item without
//! it); the page is stored under those tags, and a change to any of them purges it
//! ([`PageStore::purge`]). A render takes its purge ticket before it calls the
//! handler, so a page rendered from data older than a purge is never stored.
//!
//! In front of Redis, an in-process tier ([`crate::tier`], [`PageCacheLayer::with_tier`])
//! serves the pages this process served recently with no round trip at all, kept
//! coherent across the web servers by pub/sub, and serves what it holds while
//! Redis cannot answer.
//!
//! This file is the layer (which requests qualify, lookup, fill, store); the
//! single flight is in `flight`, HTTP negotiation (gzip, `If-None-Match`, `HEAD`,
//! what may be stored) in `negotiate`, the in-process tier in [`crate::tier`].

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};

use axum::body::Body;
use axum::extract::Request;
use axum::response::Response;
use http::Method;
use http::header::{self, HeaderName, HeaderValue};
use shop_cache::domain::ItemId;
use tower::{Layer, Service, ServiceExt};

use crate::tier::{self, PageTier};
use crate::{
    Lookup, PageKey, PageRequest, PageStore, PageTag, RenderTicket, Stored, StoredPage, log_failure,
};

mod config;
mod edge;
mod flight;
pub(crate) mod negotiate;

pub use crate::tag::PageTags;
pub use config::{CacheBypass, PageCacheConfig, Pages};
pub use edge::{MAX_SURROGATE_KEY_BYTES, MAX_SURROGATE_KEYS, SURROGATE_KEY};
use flight::{Flights, Role};
use negotiate::{Ask, Whole, serve, storable};

/// The response header naming what the cache did.
pub const X_CACHE: HeaderName = HeaderName::from_static("x-cache");

/// The response headers stored with a page and replayed on hits (the ETag is kept
/// separately, `Vary` is extended with `Accept-Encoding`).
const REPLAYED: [HeaderName; 6] = [
    header::CONTENT_TYPE,
    header::CONTENT_LANGUAGE,
    header::CACHE_CONTROL,
    header::LAST_MODIFIED,
    header::VARY,
    SURROGATE_KEY,
];

/// Counters for `/metrics`.
#[derive(Debug, Default)]
pub struct PageCacheStats {
    /// Served without calling the handler.
    pub hits: AtomicU64,
    /// Served past its TTL (while revalidating, or instead of an error).
    pub stale: AtomicU64,
    /// Cacheable requests that called the handler.
    pub misses: AtomicU64,
    /// Requests that did not qualify (or met a Redis failure) and went straight through.
    pub bypasses: AtomicU64,
    /// Redis failures met by the layer (each also logged).
    pub errors: AtomicU64,
}

fn bump(counter: &AtomicU64) {
    counter.fetch_add(1, Ordering::Relaxed);
}

/// The tower layer; see the module documentation.
#[derive(Clone)]
pub struct PageCacheLayer {
    shared: Arc<Shared>,
}

impl PageCacheLayer {
    /// A layer caching in `store`, as `config` says.
    pub fn new(store: PageStore, config: PageCacheConfig) -> Self {
        Self {
            shared: Arc::new(Shared {
                store,
                config,
                flights: Arc::default(),
                stats: Arc::new(PageCacheStats::default()),
                tier: None,
            }),
        }
    }

    /// The same layer with `tier` in front of Redis (one tier per process, shared
    /// by its layers; kept coherent by its [`crate::TierFeed`]). Call before the layer is
    /// cloned into a router.
    pub fn with_tier(mut self, tier: Option<Arc<PageTier>>) -> Self {
        if let Some(shared) = Arc::get_mut(&mut self.shared) {
            shared.tier = tier;
        }
        self
    }

    /// The layer's counters (shared by every service it wraps).
    pub fn stats(&self) -> Arc<PageCacheStats> {
        self.shared.stats.clone()
    }
}

impl<S> Layer<S> for PageCacheLayer {
    type Service = PageCache<S>;

    fn layer(&self, inner: S) -> Self::Service {
        PageCache {
            inner,
            shared: self.shared.clone(),
        }
    }
}

/// The service [`PageCacheLayer`] wraps around a handler.
#[derive(Clone)]
pub struct PageCache<S> {
    inner: S,
    shared: Arc<Shared>,
}

impl<S> Service<Request> for PageCache<S>
where
    S: Service<Request, Response = Response, Error = Infallible> + Clone + Send + 'static,
    S::Future: Send + 'static,
{
    type Response = Response;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Response, Infallible>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request) -> Self::Future {
        // Take the service that was made ready; leave a fresh clone in its place.
        let clone = self.inner.clone();
        let inner = std::mem::replace(&mut self.inner, clone);
        let shared = self.shared.clone();
        Box::pin(async move { Ok(shared.handle(req, inner).await) })
    }
}

struct Shared {
    store: PageStore,
    config: PageCacheConfig,
    flights: Arc<Flights>,
    stats: Arc<PageCacheStats>,
    tier: Option<Arc<PageTier>>,
}

impl Shared {
    async fn handle<S>(self: Arc<Self>, req: Request, inner: S) -> Response
    where
        S: Service<Request, Response = Response, Error = Infallible> + Send + 'static,
        S::Future: Send + 'static,
    {
        let Some((key, item)) = self.qualifies(&req) else {
            bump(&self.stats.bypasses);
            return labelled(call(inner, req).await, "BYPASS");
        };
        let ask = Ask::of(&req);
        if let Some(entry) = self.tier.as_ref().and_then(|tier| tier.fresh(&key))
            && let Ok(resp) = entry.page.respond(&ask)
        {
            bump(&self.stats.hits);
            return edge::kept(&self.store, resp, entry.fresh_until_ms(), "HIT");
        }
        let since = self.tier_generation();
        match self.store.lookup_entry(&key, item).await {
            Ok((Lookup::Hit(page), fresh_until)) => match serve(&page, &ask) {
                Ok(resp) => {
                    self.keep(&key, &page, fresh_until, since);
                    bump(&self.stats.hits);
                    edge::kept(&self.store, resp, fresh_until, "HIT")
                }
                Err(_) => self.fill(key, item, req, ask, inner).await,
            },
            Ok((Lookup::Stale { page, expired }, fresh_until)) => {
                let grace = self.store.grace();
                if expired < grace.while_revalidate
                    && let Ok(resp) = serve(&page, &ask)
                {
                    // Served as it is; one request across the servers renders it.
                    self.clone().revalidate(key, item, &req, inner);
                    bump(&self.stats.stale);
                    return edge::kept(&self.store, resp, fresh_until, "STALE");
                }
                let resp = self.clone().fill(key, item, req, ask.clone(), inner).await;
                if resp.status().is_server_error()
                    && expired < grace.if_error
                    && let Ok(stale) = serve(&page, &ask)
                {
                    // The page cannot be rendered now (the database is down or
                    // locked): the copy kept for this beats an error.
                    bump(&self.stats.stale);
                    return edge::kept(&self.store, stale, fresh_until, "STALE");
                }
                resp
            }
            Ok((Lookup::Miss, _)) => self.fill(key, item, req, ask, inner).await,
            Ok((Lookup::NotPopular, _)) => {
                bump(&self.stats.bypasses);
                labelled(self.render_unkept(item, req, inner).await, "BYPASS")
            }
            Err(error) => {
                bump(&self.stats.errors);
                if let Some(entry) = self.tier.as_ref().and_then(|tier| tier.fallback(&key))
                    && let Ok(resp) = entry.page.respond(&ask)
                {
                    // Redis cannot answer: the copy this process holds beats a
                    // render per request (stale-if-error, for Redis).
                    log_failure(&error, "page cache lookup failed; serving the tier's copy");
                    bump(&self.stats.stale);
                    return edge::kept(&self.store, resp, entry.fresh_until_ms(), "STALE");
                }
                bump(&self.stats.bypasses);
                log_failure(&error, "page cache lookup failed; rendering");
                labelled(self.render_unkept(item, req, inner).await, "BYPASS")
            }
        }
    }

    /// Renders a page this cache does not keep (not popular enough, or Redis
    /// failing): the same for everyone all the same, so marked as one a shared
    /// cache may keep ([`edge::mark_shared`]) when it may be stored, with an ETag.
    async fn render_unkept<S>(&self, item: Option<ItemId>, req: Request, inner: S) -> Response
    where
        S: Service<Request, Response = Response, Error = Infallible>,
    {
        let purges = self.store.purges_seen().purges();
        let ask = Ask::of(&req);
        let mut resp = call(inner, req).await;
        if storable(&resp) {
            let tags = PageTags::take(&mut resp, item);
            edge::mark_shared(&self.store, resp.headers_mut(), &tags);
            // A purge seen during the render: the page may be old, and an edge
            // whose copy that purge already dropped must not keep it.
            if self.store.purges_seen().purges() != purges {
                edge::mark_unshared(resp.headers_mut());
            }
            resp = negotiate::with_etag(resp, &ask, self.config.max_body).await;
        }
        resp
    }

    /// The tier's generation before a Redis read (none without a tier).
    fn tier_generation(&self) -> tier::FillMark {
        self.tier
            .as_ref()
            .map_or_else(Default::default, |tier| tier.generation())
    }

    /// Puts a page read from (or stored to) Redis in the tier, if there is one.
    fn keep(&self, key: &PageKey, page: &StoredPage, fresh_until: u64, since: tier::FillMark) {
        if let Some(tier) = &self.tier {
            tier.insert(key, page, fresh_until, since);
        }
    }

    /// Renders an expired page in the background, once across every web server:
    /// this process's first request for it takes the flight, and the flight's
    /// render takes the Redis lock; anyone else goes on serving the stale copy.
    fn revalidate<S>(self: Arc<Self>, key: PageKey, item: Option<ItemId>, req: &Request, inner: S)
    where
        S: Service<Request, Response = Response, Error = Infallible> + Send + 'static,
        S::Future: Send + 'static,
    {
        let Role::Leader(leader) = self.flights.join(&key) else {
            return; // already being rendered here
        };
        let mut copy = Request::new(Body::empty());
        *copy.method_mut() = req.method().clone();
        *copy.uri_mut() = req.uri().clone();
        *copy.headers_mut() = req.headers().clone();
        *copy.extensions_mut() = req.extensions().clone();
        let ask = Ask::of(&copy);
        tokio::spawn(async move {
            let lock = match self.store.try_lock(&key).await {
                Ok(Some(lock)) => lock,
                Ok(None) => return, // another server renders it
                Err(error) => {
                    bump(&self.stats.errors);
                    log_failure(&error, "page cache lock failed; not revalidating");
                    return;
                }
            };
            let (_, page) = self.render(&key, item, copy, &ask, inner).await;
            if let Some(page) = page {
                leader.publish(page);
            }
            if let Err(error) = self.store.unlock(lock).await {
                log_failure(
                    &error,
                    "page cache unlock failed; the lock expires by itself",
                );
            }
        });
    }

    /// The key and (for item pages) the item of a cacheable request, else `None`.
    fn qualifies(&self, req: &Request) -> Option<(PageKey, Option<ItemId>)> {
        if !matches!(*req.method(), Method::GET | Method::HEAD)
            || req.headers().contains_key(header::AUTHORIZATION)
        {
            return None;
        }
        let path = req.uri().path();
        let item = match self.config.pages {
            Pages::Ranked(item_of) => Some(item_of(path)?),
            Pages::Shared => None,
        };
        if req.extensions().get::<CacheBypass>().is_some() {
            return None;
        }
        let mut page = PageRequest::new(path, req.uri().query()).only_params(&self.config.params);
        for name in &self.config.vary {
            let value = req.headers().get(name).map(|v| v.as_bytes()).unwrap_or(b"");
            page = page.vary_on(name.as_str(), value);
        }
        Some((page.key(), item))
    }

    /// A cacheable request whose page is not stored: render it once.
    async fn fill<S>(
        self: Arc<Self>,
        key: PageKey,
        item: Option<ItemId>,
        req: Request,
        ask: Ask,
        inner: S,
    ) -> Response
    where
        S: Service<Request, Response = Response, Error = Infallible> + Send,
        S::Future: Send,
    {
        match self.flights.join(&key) {
            Role::Follower(flight) => {
                if let Some(page) = flight.wait(self.config.wait).await
                    && let Ok(resp) = serve(&page, &ask)
                {
                    bump(&self.stats.hits);
                    return labelled(resp, "HIT");
                }
                // The render was not storable, failed or is too slow: do it here.
                self.render(&key, item, req, &ask, inner).await.0
            }
            Role::Leader(leader) => {
                let lock = match self.store.try_lock(&key).await {
                    Ok(Some(lock)) => Some(lock),
                    Ok(None) => {
                        // Another process is rendering it: wait for its page.
                        let since = self.tier_generation();
                        if let Some((page, fresh_until)) = self.poll_for(&key).await
                            && let Ok(resp) = serve(&page, &ask)
                        {
                            self.keep(&key, &page, fresh_until, since);
                            leader.publish(Arc::new(page));
                            bump(&self.stats.hits);
                            return labelled(resp, "HIT");
                        }
                        None
                    }
                    Err(error) => {
                        bump(&self.stats.errors);
                        log_failure(&error, "page cache lock failed; rendering");
                        None
                    }
                };
                let (resp, page) = self.render(&key, item, req, &ask, inner).await;
                if let Some(page) = page {
                    leader.publish(page);
                }
                if let Some(lock) = lock
                    && let Err(error) = self.store.unlock(lock).await
                {
                    log_failure(
                        &error,
                        "page cache unlock failed; the lock expires by itself",
                    );
                }
                resp
            }
        }
    }

    /// Stores a rendered page under its tags; `true` if it was stored (a refusal is
    /// a purge since the render began: the page is served to its own request only).
    async fn store_page(
        &self,
        key: &PageKey,
        page: &StoredPage,
        tags: &[PageTag],
        ticket: &RenderTicket,
    ) -> bool {
        match self.store.store(key, page, tags, ticket).await {
            Ok(Stored::Yes) => true,
            Ok(Stored::Refused) => {
                tracing::debug!("a page rendered before a purge was not stored");
                false
            }
            Err(error) => {
                bump(&self.stats.errors);
                log_failure(&error, "storing a page failed");
                false
            }
        }
    }

    /// Polls Redis for a page another process is rendering, up to the wait limit.
    async fn poll_for(&self, key: &PageKey) -> Option<(StoredPage, u64)> {
        let deadline = tokio::time::Instant::now() + self.config.wait;
        while tokio::time::Instant::now() < deadline {
            tokio::time::sleep(self.config.poll).await;
            match self.store.get_entry(key).await {
                Ok(Some(found)) => return Some(found),
                Ok(None) => {}
                Err(error) => {
                    bump(&self.stats.errors);
                    log_failure(&error, "page cache poll failed; rendering");
                    return None;
                }
            }
        }
        None
    }

    /// Calls the handler; stores its response if it may be stored, and returns the
    /// page too if it was stored (for the requests waiting on this render).
    async fn render<S>(
        &self,
        key: &PageKey,
        item: Option<ItemId>,
        req: Request,
        ask: &Ask,
        inner: S,
    ) -> (Response, Option<Arc<StoredPage>>)
    where
        S: Service<Request, Response = Response, Error = Infallible> + Send,
        S::Future: Send,
    {
        bump(&self.stats.misses);
        let since = self.tier_generation();
        // Before the handler reads anything: a purge after this refuses the store.
        let ticket = match self.store.begin_render().await {
            Ok(ticket) => Some(ticket),
            Err(error) => {
                bump(&self.stats.errors);
                log_failure(&error, "page cache epoch read failed; not storing");
                None
            }
        };
        let mut resp = call(inner, req).await;
        let tags = PageTags::take(&mut resp, item);
        if !storable(&resp) {
            return (labelled(resp, "MISS"), None);
        }
        edge::mark_shared(&self.store, resp.headers_mut(), &tags);
        let (parts, body) = resp.into_parts();
        let bytes = match negotiate::read_whole(body, self.config.max_body).await {
            Whole::Read(bytes) => bytes,
            Whole::TooLong(body) => {
                return (labelled(Response::from_parts(parts, body), "MISS"), None);
            }
            Whole::Failed(resp) => return (labelled(resp, "MISS"), None),
        };
        let headers = REPLAYED
            .iter()
            .chain([&header::ETAG])
            .filter_map(|name| {
                let value = parts.headers.get(name)?;
                Some((name.as_str().to_owned(), value.as_bytes().to_vec()))
            })
            .collect();
        let page = Arc::new(StoredPage::new(parts.status.as_u16(), headers, &bytes));
        let fresh_until = crate::now_ms() + self.store.ttl().as_millis() as u64;
        let stored = match ticket {
            Some(ticket) => self.store_page(key, &page, &tags, &ticket).await,
            None => false,
        };
        if stored {
            self.keep(key, &page, fresh_until, since);
        }
        // Served from what was stored, so a hit and a miss look the same; if that
        // fails (it cannot, the page was just built), fall back to the handler's bytes.
        let mut resp =
            serve(&page, ask).unwrap_or_else(|_| Response::from_parts(parts, Body::from(bytes)));
        // Refused because a purge came after its render began (or not known to be
        // fresh): the edge must not keep it either, or it would serve it for a TTL
        // after the purge that already passed it by.
        if !stored {
            edge::mark_unshared(resp.headers_mut());
        }
        // Handed to the requests waiting on this render only if it was stored: a
        // page refused because a purge came after its render began may be old, and
        // a request that arrived after the purge must not get it.
        (labelled(resp, "MISS"), stored.then_some(page))
    }
}

async fn call<S>(inner: S, req: Request) -> Response
where
    S: Service<Request, Response = Response, Error = Infallible>,
{
    match inner.oneshot(req).await {
        Ok(resp) => resp,
        Err(never) => match never {},
    }
}

fn labelled(mut resp: Response, what: &'static str) -> Response {
    resp.headers_mut()
        .insert(X_CACHE, HeaderValue::from_static(what));
    resp
}
