//! The page-cache tower layer: serves popular pages from Redis without calling the
//! handler, stores the pages it renders, and makes sure a page that is missing is
//! rendered once however many requests want it at the same moment.
//!
//! Which requests qualify (the book's `can_cache`, stricter):
//! - `GET` or `HEAD`, without an `Authorization` header, without a `_` query
//!   parameter (the book's mark of a dynamic request);
//! - the key covers the path, the query parameters the page reads
//!   ([`PageCacheConfig::params`], none by default) and the headers it varies on:
//!   other parameters cannot change the page, so they do not make a new entry;
//! - for [`Pages::Ranked`], only paths its function maps to an item (the shop's:
//!   `/items/{id}` with a valid id, [`Pages::ITEMS`]) whose item ranks below the
//!   limit in `viewed:` (rank 9,999 is cached, 10,000 is not, no views is not);
//!   for [`Pages::Shared`] (pages the same for everyone, like the flash-sale shell)
//!   any path.
//!
//! Which responses are stored: status 200, no `Set-Cookie`, no `Cache-Control` of
//! `private`, `no-store` or `no-cache`, not already content-encoded, of known size.
//!
//! Every response says what happened in `X-Cache`: `HIT` (from Redis, or from the
//! render another request of this process was doing), `MISS` (rendered here) or
//! `BYPASS` (not a cacheable request, or Redis unavailable). A matching
//! `If-None-Match` gets `304 Not Modified`. Bodies are stored gzip-compressed and
//! sent as stored to clients that accept gzip, decompressed for the others.
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
//! ```no_run
//! use axum::{Router, routing::get};
//! use shop_cache::{keys::Keys, page_cache::{PageStore, DEFAULT_TTL, DEFAULT_RANK_LIMIT}};
//! use shop_web::page_cache::{PageCacheConfig, PageCacheLayer};
//!
//! # async fn demo() -> Result<(), shop_cache::CacheError> {
//! let conn = shop_cache::connect("redis://127.0.0.1:6379").await?;
//! let store = PageStore::new(conn, Keys::default(), DEFAULT_TTL, DEFAULT_RANK_LIMIT);
//! let app: Router = Router::new()
//!     .route("/items/{id}", get(|| async { "an item page" }))
//!     .layer(PageCacheLayer::new(store, PageCacheConfig::default()));
//! # Ok(()) }
//! ```

use std::collections::HashMap;
use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Body;
use axum::extract::Request;
use axum::response::Response;
use bytes::Bytes;
use http::header::{self, HeaderName, HeaderValue};
use http::{HeaderMap, Method, StatusCode};
use http_body::Body as _;
use shop_cache::CacheError;
use shop_cache::domain::ItemId;
use shop_cache::page_cache::{Lookup, PageKey, PageRequest, PageStore, StoredPage};
use tokio::sync::watch;
use tower::{Layer, Service, ServiceExt};

/// The response header naming what the cache did.
pub const X_CACHE: HeaderName = HeaderName::from_static("x-cache");

/// The response headers stored with a page and replayed on hits (the ETag is kept
/// separately, `Vary` is extended with `Accept-Encoding`).
const REPLAYED: [HeaderName; 5] = [
    header::CONTENT_TYPE,
    header::CONTENT_LANGUAGE,
    header::CACHE_CONTROL,
    header::LAST_MODIFIED,
    header::VARY,
];

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
}

/// The item of a `/items/{id}` path with a valid id.
pub fn item_path(path: &str) -> Option<ItemId> {
    path.strip_prefix("/items/")?.parse().ok()
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

/// Counters for `/metrics`.
#[derive(Debug, Default)]
pub struct PageCacheStats {
    /// Served without calling the handler.
    pub hits: AtomicU64,
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
                flights: Mutex::new(HashMap::new()),
                stats: Arc::new(PageCacheStats::default()),
            }),
        }
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

/// A page another request of this process is rendering: `None` until it is stored.
type Flight = watch::Receiver<Option<Arc<StoredPage>>>;

struct Shared {
    store: PageStore,
    config: PageCacheConfig,
    flights: Mutex<HashMap<PageKey, Flight>>,
    stats: Arc<PageCacheStats>,
}

/// What the client asked for that decides how a stored page is sent.
struct Ask {
    head: bool,
    gzip: bool,
    if_none_match: Option<HeaderValue>,
}

impl Ask {
    fn of(req: &Request) -> Self {
        Self {
            head: req.method() == Method::HEAD,
            gzip: accepts_gzip(req.headers()),
            if_none_match: req.headers().get(header::IF_NONE_MATCH).cloned(),
        }
    }
}

enum Role {
    Leader(watch::Sender<Option<Arc<StoredPage>>>),
    Follower(Flight),
}

impl Shared {
    async fn handle<S>(self: Arc<Self>, req: Request, inner: S) -> Response
    where
        S: Service<Request, Response = Response, Error = Infallible> + Send,
        S::Future: Send,
    {
        let Some((key, item)) = self.qualifies(&req) else {
            bump(&self.stats.bypasses);
            return labelled(call(inner, req).await, "BYPASS");
        };
        let ask = Ask::of(&req);
        match self.store.lookup(&key, item).await {
            Ok(Lookup::Hit(page)) => match serve(&page, &ask) {
                Ok(resp) => {
                    bump(&self.stats.hits);
                    labelled(resp, "HIT")
                }
                Err(_) => self.fill(key, req, ask, inner).await,
            },
            Ok(Lookup::Miss) => self.fill(key, req, ask, inner).await,
            Ok(Lookup::NotPopular) => {
                bump(&self.stats.bypasses);
                labelled(call(inner, req).await, "BYPASS")
            }
            Err(error) => {
                bump(&self.stats.errors);
                bump(&self.stats.bypasses);
                if error.is_failing_fast() {
                    tracing::debug!(%error, "page cache lookup failed; rendering");
                } else {
                    tracing::warn!(%error, "page cache lookup failed; rendering");
                }
                labelled(call(inner, req).await, "BYPASS")
            }
        }
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
        let mut page = PageRequest::new(path, req.uri().query());
        if page.has_param("_") {
            return None;
        }
        page = page.only_params(&self.config.params);
        for name in &self.config.vary {
            let value = req.headers().get(name).map(|v| v.as_bytes()).unwrap_or(b"");
            page = page.vary_on(name.as_str(), value);
        }
        Some((page.key(), item))
    }

    /// A cacheable request whose page is not stored: render it once.
    async fn fill<S>(self: Arc<Self>, key: PageKey, req: Request, ask: Ask, inner: S) -> Response
    where
        S: Service<Request, Response = Response, Error = Infallible> + Send,
        S::Future: Send,
    {
        let role = {
            let mut flights = self.flights.lock().unwrap_or_else(|e| e.into_inner());
            match flights.get(&key) {
                Some(flight) => Role::Follower(flight.clone()),
                None => {
                    let (tx, rx) = watch::channel(None);
                    flights.insert(key.clone(), rx);
                    Role::Leader(tx)
                }
            }
        };
        match role {
            Role::Follower(mut flight) => {
                let waited =
                    tokio::time::timeout(self.config.wait, flight.wait_for(Option::is_some));
                if let Ok(Ok(page)) = waited.await {
                    let page = page.clone().expect("waited for Some");
                    if let Ok(resp) = serve(&page, &ask) {
                        bump(&self.stats.hits);
                        return labelled(resp, "HIT");
                    }
                }
                // The render was not storable, failed or is too slow: do it here.
                self.render(&key, req, &ask, inner).await.0
            }
            Role::Leader(tx) => {
                let _flight = FlightGuard {
                    shared: self.clone(),
                    key: key.clone(),
                };
                let lock = match self.store.try_lock(&key).await {
                    Ok(Some(lock)) => Some(lock),
                    Ok(None) => {
                        // Another process is rendering it: wait for its page.
                        if let Some(page) = self.poll_for(&key).await
                            && let Ok(resp) = serve(&page, &ask)
                        {
                            tx.send_replace(Some(Arc::new(page)));
                            bump(&self.stats.hits);
                            return labelled(resp, "HIT");
                        }
                        None
                    }
                    Err(error) => {
                        bump(&self.stats.errors);
                        tracing::warn!(%error, "page cache lock failed; rendering");
                        None
                    }
                };
                let (resp, page) = self.render(&key, req, &ask, inner).await;
                if let Some(page) = page {
                    tx.send_replace(Some(page));
                }
                if let Some(lock) = lock
                    && let Err(error) = self.store.unlock(lock).await
                {
                    tracing::warn!(%error, "page cache unlock failed; the lock expires by itself");
                }
                resp
            }
        }
    }

    /// Polls Redis for a page another process is rendering, up to the wait limit.
    async fn poll_for(&self, key: &PageKey) -> Option<StoredPage> {
        let deadline = tokio::time::Instant::now() + self.config.wait;
        while tokio::time::Instant::now() < deadline {
            tokio::time::sleep(self.config.poll).await;
            match self.store.get(key).await {
                Ok(Some(page)) => return Some(page),
                Ok(None) => {}
                Err(error) => {
                    bump(&self.stats.errors);
                    tracing::warn!(%error, "page cache poll failed; rendering");
                    return None;
                }
            }
        }
        None
    }

    /// Calls the handler; stores its response if it may be stored.
    async fn render<S>(
        &self,
        key: &PageKey,
        req: Request,
        ask: &Ask,
        inner: S,
    ) -> (Response, Option<Arc<StoredPage>>)
    where
        S: Service<Request, Response = Response, Error = Infallible> + Send,
        S::Future: Send,
    {
        bump(&self.stats.misses);
        let resp = call(inner, req).await;
        if !storable(&resp) {
            return (labelled(resp, "MISS"), None);
        }
        let (parts, body) = resp.into_parts();
        if body
            .size_hint()
            .upper()
            .is_none_or(|n| n > self.config.max_body as u64)
        {
            return (labelled(Response::from_parts(parts, body), "MISS"), None);
        }
        let bytes = match axum::body::to_bytes(body, self.config.max_body).await {
            Ok(bytes) => bytes,
            Err(error) => {
                tracing::error!(%error, "reading a page body failed");
                let mut resp = Response::new(Body::empty());
                *resp.status_mut() = StatusCode::INTERNAL_SERVER_ERROR;
                return (labelled(resp, "MISS"), None);
            }
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
        if let Err(error) = self.store.store(key, &page).await {
            bump(&self.stats.errors);
            tracing::warn!(%error, "storing a page failed");
        }
        // Served from what was stored, so a hit and a miss look the same; if that
        // fails (it cannot, the page was just built), fall back to the handler's bytes.
        let resp =
            serve(&page, ask).unwrap_or_else(|_| Response::from_parts(parts, Body::from(bytes)));
        (labelled(resp, "MISS"), Some(page))
    }
}

/// Removes a finished (or abandoned: the client went away) flight, so the next miss
/// of the key starts a new one.
struct FlightGuard {
    shared: Arc<Shared>,
    key: PageKey,
}

impl Drop for FlightGuard {
    fn drop(&mut self) {
        let mut flights = self
            .shared
            .flights
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        flights.remove(&self.key);
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

/// May this response be stored and shown to everyone?
fn storable(resp: &Response) -> bool {
    let h = resp.headers();
    resp.status() == StatusCode::OK
        && !h.contains_key(header::SET_COOKIE)
        && !h.contains_key(header::CONTENT_ENCODING)
        && !h.get_all(header::CACHE_CONTROL).iter().any(|v| {
            v.to_str().unwrap_or("").split(',').any(|d| {
                let d = d.trim();
                ["private", "no-store", "no-cache"].iter().any(|bad| {
                    d.eq_ignore_ascii_case(bad)
                        || d.to_ascii_lowercase().starts_with(&format!("{bad}="))
                })
            })
        })
}

/// Does `Accept-Encoding` allow gzip (`gzip`, `x-gzip` or `*`, with q > 0)?
fn accepts_gzip(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::ACCEPT_ENCODING)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|coding| {
            let mut parts = coding.split(';');
            let name = parts.next().unwrap_or("").trim();
            let q_zero = parts.any(|p| {
                p.trim()
                    .strip_prefix("q=")
                    .and_then(|q| q.trim().parse::<f32>().ok())
                    .is_some_and(|q| q <= 0.0)
            });
            !q_zero
                && ["gzip", "x-gzip", "*"]
                    .iter()
                    .any(|g| name.eq_ignore_ascii_case(g))
        })
}

/// Does `If-None-Match` name this ETag (weak comparison, or `*`)?
fn etag_matches(if_none_match: &HeaderValue, etag: &str) -> bool {
    let strip = |t: &str| t.trim().trim_start_matches("W/").to_owned();
    let etag = strip(etag);
    if_none_match
        .to_str()
        .unwrap_or("")
        .split(',')
        .any(|t| t.trim() == "*" || strip(t) == etag)
}

/// Builds the response for a stored page as the client asked for it.
fn serve(page: &StoredPage, ask: &Ask) -> Result<Response, CacheError> {
    let mut headers = HeaderMap::new();
    let mut vary = String::new();
    for (name, value) in page.headers() {
        let (Ok(name), Ok(value)) = (
            HeaderName::try_from(name.as_str()),
            HeaderValue::from_bytes(value),
        ) else {
            return Err(CacheError::Corrupt { what: "cache:" });
        };
        if name == header::VARY {
            vary = format!("{}, ", value.to_str().unwrap_or(""));
        } else {
            headers.append(name, value);
        }
    }
    let vary = HeaderValue::try_from(format!("{vary}Accept-Encoding"))
        .map_err(|_| CacheError::Corrupt { what: "cache:" })?;
    headers.insert(header::VARY, vary);
    let etag =
        HeaderValue::from_str(page.etag()).map_err(|_| CacheError::Corrupt { what: "cache:" })?;
    headers.insert(header::ETAG, etag.clone());

    let not_modified = ask
        .if_none_match
        .as_ref()
        .is_some_and(|inm| etag_matches(inm, page.etag()));
    let (status, body) = if not_modified {
        (StatusCode::NOT_MODIFIED, Bytes::new())
    } else if ask.gzip {
        headers.insert(header::CONTENT_ENCODING, HeaderValue::from_static("gzip"));
        (status_of(page)?, page.gzip_body())
    } else {
        (status_of(page)?, Bytes::from(page.body()?))
    };
    if !not_modified {
        headers.insert(header::CONTENT_LENGTH, HeaderValue::from(body.len()));
    }
    let body = if ask.head {
        Body::empty()
    } else {
        Body::from(body)
    };
    let mut resp = Response::new(body);
    *resp.status_mut() = status;
    *resp.headers_mut() = headers;
    Ok(resp)
}

fn status_of(page: &StoredPage) -> Result<StatusCode, CacheError> {
    StatusCode::from_u16(page.status()).map_err(|_| CacheError::Corrupt { what: "cache:" })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(
                HeaderName::try_from(*k).unwrap(),
                HeaderValue::from_str(v).unwrap(),
            );
        }
        h
    }

    #[test]
    fn gzip_acceptance() {
        let yes = [
            "gzip",
            "gzip, deflate, br",
            "br;q=1.0, gzip;q=0.8",
            "GZIP",
            "*",
            "x-gzip",
        ];
        for v in yes {
            assert!(accepts_gzip(&headers(&[("accept-encoding", v)])), "{v}");
        }
        let no = ["", "br", "identity", "gzip;q=0", "gzip; q=0.0, br"];
        for v in no {
            assert!(!accepts_gzip(&headers(&[("accept-encoding", v)])), "{v}");
        }
        assert!(!accepts_gzip(&HeaderMap::new()));
    }

    #[test]
    fn etag_matching() {
        let m = |inm: &str| etag_matches(&HeaderValue::from_str(inm).unwrap(), "\"abc\"");
        assert!(m("\"abc\""));
        assert!(m("W/\"abc\""));
        assert!(m("\"x\", \"abc\""));
        assert!(m("*"));
        assert!(!m("\"abcd\""));
        assert!(!m("abc"));
    }

    #[test]
    fn storability() {
        let resp = |status: u16, pairs: &[(&str, &str)]| {
            let mut r = Response::new(Body::empty());
            *r.status_mut() = StatusCode::from_u16(status).unwrap();
            *r.headers_mut() = headers(pairs);
            r
        };
        assert!(storable(&resp(200, &[])));
        assert!(storable(&resp(
            200,
            &[("cache-control", "public, max-age=60")]
        )));
        assert!(!storable(&resp(404, &[])));
        assert!(!storable(&resp(302, &[])));
        assert!(!storable(&resp(200, &[("set-cookie", "a=b")])));
        assert!(!storable(&resp(200, &[("cache-control", "Private")])));
        assert!(!storable(&resp(
            200,
            &[("cache-control", "max-age=0, no-store")]
        )));
        assert!(!storable(&resp(200, &[("cache-control", "private=\"x\"")])));
        assert!(!storable(&resp(200, &[("content-encoding", "br")])));
    }
}
