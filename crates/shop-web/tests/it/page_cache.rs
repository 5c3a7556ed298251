use std::collections::HashMap;
use std::io::Read;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::{Path, Query, State};
use axum::http::{Request, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use http_body_util::BodyExt;
use redis::AsyncCommands;
use redis::aio::ConnectionManagerConfig;
use shop_cache::keys::Keys;
use shop_page_cache::{DEFAULT_RANK_LIMIT, DEFAULT_TTL, PageStore, PageTag, StaleGrace};
use shop_testkit::TestRedis;
use shop_web::page_cache::{PageCacheConfig, PageCacheLayer, Pages};
use tower::ServiceExt;

#[derive(Clone)]
struct Handler {
    renders: Arc<AtomicUsize>,
    delay: Duration,
    /// Answer 503, as a page whose database is down does.
    failing: Arc<AtomicBool>,
}

fn page_body(id: &str) -> String {
    format!(
        "<!doctype html><title>Item {id}</title>{}",
        "<p>A fine item.</p>".repeat(200)
    )
}

async fn item(
    State(h): State<Handler>,
    Path(id): Path<String>,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    h.renders.fetch_add(1, Ordering::SeqCst);
    tokio::time::sleep(h.delay).await;
    if h.failing.load(Ordering::SeqCst) {
        return (StatusCode::SERVICE_UNAVAILABLE, "database unavailable").into_response();
    }
    let html = [(header::CONTENT_TYPE, "text/html; charset=utf-8")];
    match q.get("mode").map(String::as_str) {
        Some("cookie") => (html, [(header::SET_COOKIE, "a=b")], page_body(&id)).into_response(),
        Some("private") => {
            (html, [(header::CACHE_CONTROL, "private")], page_body(&id)).into_response()
        }
        Some("nostore") => {
            (html, [(header::CACHE_CONTROL, "no-store")], page_body(&id)).into_response()
        }
        Some("missing") => (StatusCode::NOT_FOUND, "no such item").into_response(),
        _ => (html, page_body(&id)).into_response(),
    }
}

/// A page that is not an item page (cart, flash-sale shell).
async fn other(State(h): State<Handler>) -> Response {
    h.renders.fetch_add(1, Ordering::SeqCst);
    ([(header::CONTENT_TYPE, "text/html")], page_body("other")).into_response()
}

struct Shop {
    server: TestRedis,
    renders: Arc<AtomicUsize>,
    failing: Arc<AtomicBool>,
    layer: PageCacheLayer,
    app: Router,
}

impl Shop {
    /// A layer over the test handler, keyed on the parameters it reads.
    async fn start() -> Self {
        Self::with(reads_params(), Duration::ZERO).await
    }

    async fn with(config: PageCacheConfig, delay: Duration) -> Self {
        let server = TestRedis::start();
        Self::on(server, config, delay).await
    }

    async fn on(server: TestRedis, config: PageCacheConfig, delay: Duration) -> Self {
        let store = |conn| {
            PageStore::new(conn, &Keys::default(), DEFAULT_TTL)
                .ranked(Keys::default().item_views(), DEFAULT_RANK_LIMIT)
        };
        Self::on_store(server, config, delay, store).await
    }

    /// A shop whose store is `store` over a connection to `server`.
    async fn on_store(
        server: TestRedis,
        config: PageCacheConfig,
        delay: Duration,
        store: impl FnOnce(shop_cache::RedisConn) -> PageStore,
    ) -> Self {
        let quick = ConnectionManagerConfig::new()
            .set_response_timeout(Some(Duration::from_millis(300)))
            .set_connection_timeout(Some(Duration::from_millis(200)))
            .set_number_of_retries(1);
        let conn = shop_cache::connect_with(&server.url(), quick)
            .await
            .unwrap();
        let layer = PageCacheLayer::new(store(conn), config);
        let renders = Arc::new(AtomicUsize::new(0));
        let failing = Arc::new(AtomicBool::new(false));
        let app = app(&layer, renders.clone(), failing.clone(), delay);
        Self {
            server,
            renders,
            failing,
            layer,
            app,
        }
    }

    /// Gives items 1..=n ranks 0..n-1 in `viewed:`.
    async fn rank_items(&self, n: u64) {
        let mut raw = self.server.conn().await;
        let ids: Vec<u64> = (1..=n).collect();
        for chunk in ids.chunks(1_000) {
            let members: Vec<(f64, u64)> = chunk
                .iter()
                .map(|&i| (i as f64 - n as f64 - 1.0, i))
                .collect();
            let _: () = raw.zadd_multiple("viewed:", &members).await.unwrap();
        }
    }

    async fn get(&self, uri: &str) -> Response {
        self.send(Request::get(uri).body(Body::empty()).unwrap())
            .await
    }

    /// A request the app marked to skip the cache (`CacheBypass`).
    async fn get_bypassing(&self, uri: &str) -> Response {
        let mut req = Request::get(uri).body(Body::empty()).unwrap();
        req.extensions_mut()
            .insert(shop_web::page_cache::CacheBypass);
        self.send(req).await
    }

    async fn send(&self, req: Request<Body>) -> Response {
        self.app.clone().oneshot(req).await.unwrap()
    }

    fn renders(&self) -> usize {
        self.renders.load(Ordering::SeqCst)
    }

    async fn stored_pages(&self) -> usize {
        let keys: Vec<String> = self.server.conn().await.keys("cache:*").await.unwrap();
        keys.len()
    }
}

/// The test handler reads `mode` (and the key tests use `a` and `b`).
fn reads_params() -> PageCacheConfig {
    PageCacheConfig {
        params: vec!["a", "b", "mode"],
        ..PageCacheConfig::new(shop_web::page_cache::ITEMS)
    }
}

fn app(
    layer: &PageCacheLayer,
    renders: Arc<AtomicUsize>,
    failing: Arc<AtomicBool>,
    delay: Duration,
) -> Router {
    Router::new()
        .route("/items/{id}", get(item))
        .route("/cart", get(other))
        .route("/items/{id}/reviews", get(other))
        .with_state(Handler {
            renders,
            delay,
            failing,
        })
        .layer(layer.clone())
}

fn x_cache(resp: &Response) -> &str {
    resp.headers().get("x-cache").unwrap().to_str().unwrap()
}

async fn body(resp: Response) -> Vec<u8> {
    resp.into_body()
        .collect()
        .await
        .unwrap()
        .to_bytes()
        .to_vec()
}

#[tokio::test]
async fn a_popular_item_page_misses_then_hits() {
    let shop = Shop::start().await;
    shop.rank_items(5).await;
    let first = shop.get("/items/3").await;
    assert_eq!(first.status(), StatusCode::OK);
    assert_eq!(x_cache(&first), "MISS");
    assert_eq!(first.headers().get(header::AGE), None, "rendered now");
    let second = shop.get("/items/3").await;
    assert_eq!(x_cache(&second), "HIT");
    // How old the kept page is, for a cache in front.
    assert!(age(&second) < 10, "{:?}", second.headers());
    assert_eq!(
        second.headers()[header::CONTENT_TYPE],
        "text/html; charset=utf-8"
    );
    assert_eq!(body(first).await, body(second).await);
    assert_eq!(shop.renders(), 1, "the hit did not call the handler");

    // Stored for the TTL under one key.
    let keys: Vec<String> = shop.server.conn().await.keys("cache:*").await.unwrap();
    assert_eq!(keys.len(), 1);
    let ttl: i64 = shop.server.conn().await.pttl(&keys[0]).await.unwrap();
    assert!(ttl > 290_000 && ttl <= 300_000, "{ttl}");
    let stats = shop.layer.stats();
    assert_eq!(stats.hits.load(Ordering::Relaxed), 1);
    assert_eq!(stats.misses.load(Ordering::Relaxed), 1);
}

#[tokio::test]
async fn rank_9999_is_cached_and_rank_10000_is_not() {
    let shop = Shop::start().await;
    shop.rank_items(10_001).await;
    let rank: Option<u64> = shop
        .server
        .conn()
        .await
        .zrank("viewed:", 10_000)
        .await
        .unwrap();
    assert_eq!(rank, Some(9_999));

    shop.get("/items/10000").await;
    assert_eq!(x_cache(&shop.get("/items/10000").await), "HIT");

    assert_eq!(x_cache(&shop.get("/items/10001").await), "BYPASS");
    assert_eq!(x_cache(&shop.get("/items/10001").await), "BYPASS");
    assert_eq!(shop.renders(), 3);
    assert_eq!(shop.stored_pages().await, 1);
}

#[tokio::test]
async fn an_item_with_no_views_is_not_cached() {
    let shop = Shop::start().await;
    shop.rank_items(5).await;
    assert_eq!(x_cache(&shop.get("/items/6").await), "BYPASS");
    assert_eq!(x_cache(&shop.get("/items/6").await), "BYPASS");
    assert_eq!(shop.stored_pages().await, 0);
}

/// A page rendered and not kept (its item not popular enough) has the ETag of
/// its bytes, and a client holding those bytes gets `304 Not Modified`.
#[tokio::test]
async fn a_page_not_kept_answers_304_to_its_etag() {
    let shop = Shop::start().await;
    shop.rank_items(5).await;
    let first = shop.get("/items/6").await;
    assert_eq!(x_cache(&first), "BYPASS");
    let etag = first.headers()[header::ETAG].to_str().unwrap().to_owned();
    assert!(!body(first).await.is_empty());
    let asking = |uri: &str, inm: &str| {
        Request::get(uri)
            .header(header::IF_NONE_MATCH, inm)
            .body(Body::empty())
            .unwrap()
    };
    let again = shop.send(asking("/items/6", &etag)).await;
    assert_eq!(again.status(), StatusCode::NOT_MODIFIED);
    assert_eq!(
        (x_cache(&again), &again.headers()[header::ETAG]),
        ("BYPASS", &etag.parse().unwrap())
    );
    assert!(body(again).await.is_empty());
    // Another page's bytes, another ETag: sent in full.
    let other = shop.send(asking("/items/7", &etag)).await;
    assert_eq!(other.status(), StatusCode::OK);
    assert_ne!(other.headers()[header::ETAG], etag.as_str());
    assert!(!body(other).await.is_empty());
    // A page that may not be shared gets none.
    let private = shop.get("/items/6?mode=private").await;
    assert_eq!(private.status(), StatusCode::OK);
    assert!(private.headers().get(header::ETAG).is_none());
    assert_eq!((shop.renders(), shop.stored_pages().await), (4, 0));
}

#[tokio::test]
async fn parameters_the_page_does_not_read_do_not_make_new_entries() {
    // The cache-busting drill: `/items/1?r=<random>` made one entry and one render
    // per request. Item pages read no parameter, so they all share one entry.
    let shop = Shop::with(
        PageCacheConfig::new(shop_web::page_cache::ITEMS),
        Duration::ZERO,
    )
    .await;
    shop.rank_items(5).await;
    assert_eq!(x_cache(&shop.get("/items/1").await), "MISS");
    for r in 0..50 {
        let resp = shop.get(&format!("/items/1?r={r}&utm_source=x{r}")).await;
        assert_eq!(x_cache(&resp), "HIT", "r={r}");
    }
    assert_eq!(shop.renders(), 1);
    assert_eq!(shop.stored_pages().await, 1);
    // The book's `_` marker is one more ignored parameter, unless the app marked
    // the request (the shop does for admins only).
    assert_eq!(x_cache(&shop.get("/items/1?_=1").await), "HIT");
    assert_eq!(x_cache(&shop.get_bypassing("/items/1?_=1").await), "BYPASS");
}

#[tokio::test]
async fn a_marked_request_bypasses_and_read_parameters_are_part_of_the_key() {
    let shop = Shop::start().await;
    shop.rank_items(5).await;
    assert_eq!(
        x_cache(&shop.get_bypassing("/items/1?_=123").await),
        "BYPASS"
    );
    assert_eq!(
        x_cache(&shop.get_bypassing("/items/1?a=1&_").await),
        "BYPASS"
    );
    assert_eq!(shop.stored_pages().await, 0);

    assert_eq!(x_cache(&shop.get("/items/1?a=1&b=2").await), "MISS");
    assert_eq!(
        x_cache(&shop.get("/items/1?b=2&a=1").await),
        "HIT",
        "order does not matter"
    );
    assert_eq!(
        x_cache(&shop.get("/items/1?a=2&b=2").await),
        "MISS",
        "values do"
    );
    assert_eq!(
        x_cache(&shop.get("/items/1?a=2&b=2&unread=9").await),
        "HIT",
        "parameters the page does not read do not"
    );
}

#[tokio::test]
async fn responses_that_must_not_be_shared_are_not_stored() {
    let shop = Shop::start().await;
    shop.rank_items(5).await;
    for mode in ["cookie", "private", "nostore", "missing"] {
        let uri = format!("/items/2?mode={mode}");
        let first = shop.get(&uri).await;
        assert_eq!(x_cache(&first), "MISS", "{mode}");
        let second = shop.get(&uri).await;
        assert_eq!(
            x_cache(&second),
            "MISS",
            "{mode} must not be served from cache"
        );
        if mode == "cookie" {
            assert!(second.headers().contains_key(header::SET_COOKIE));
        }
    }
    assert_eq!(shop.renders(), 8);
    assert_eq!(shop.stored_pages().await, 0);
}

#[tokio::test]
async fn requests_that_do_not_qualify_bypass() {
    let shop = Shop::start().await;
    shop.rank_items(5).await;
    let with_auth = Request::get("/items/1")
        .header(header::AUTHORIZATION, "Bearer x")
        .body(Body::empty())
        .unwrap();
    assert_eq!(x_cache(&shop.send(with_auth).await), "BYPASS");
    let post = Request::post("/items/1").body(Body::empty()).unwrap();
    // Not routed for POST: 405 from the router, still passed through the layer.
    assert_eq!(x_cache(&shop.send(post).await), "BYPASS");
    for uri in ["/cart", "/items/1/reviews"] {
        assert_eq!(x_cache(&shop.get(uri).await), "BYPASS", "{uri}");
    }
    // An id that is not an item id is not cached (the handler answers whatever it does).
    assert_eq!(x_cache(&shop.get("/items/abc").await), "BYPASS");
    assert_eq!(x_cache(&shop.get("/items/0").await), "BYPASS");
    assert_eq!(shop.stored_pages().await, 0);
    // An authorized request never reads a stored page either.
    shop.get("/items/1").await;
    let with_auth = Request::get("/items/1")
        .header(header::AUTHORIZATION, "Bearer x")
        .body(Body::empty())
        .unwrap();
    assert_eq!(x_cache(&shop.send(with_auth).await), "BYPASS");
}

#[tokio::test]
async fn compressed_storage_round_trips_for_every_client() {
    let shop = Shop::start().await;
    shop.rank_items(5).await;
    let raw = page_body("4");
    shop.get("/items/4").await;

    let plain = shop.get("/items/4").await;
    assert_eq!(x_cache(&plain), "HIT");
    assert!(!plain.headers().contains_key(header::CONTENT_ENCODING));
    assert_eq!(plain.headers()[header::VARY], "Accept-Encoding");
    assert_eq!(
        body(plain).await,
        raw.as_bytes(),
        "byte-identical without gzip"
    );

    let req = Request::get("/items/4")
        .header(header::ACCEPT_ENCODING, "gzip, deflate, br")
        .body(Body::empty())
        .unwrap();
    let gz = shop.send(req).await;
    assert_eq!(x_cache(&gz), "HIT");
    assert_eq!(gz.headers()[header::CONTENT_ENCODING], "gzip");
    let compressed = body(gz).await;
    assert!(
        compressed.len() < raw.len() / 5,
        "{} vs {}",
        compressed.len(),
        raw.len()
    );
    let mut out = Vec::new();
    flate2::read::GzDecoder::new(&compressed[..])
        .read_to_end(&mut out)
        .unwrap();
    assert_eq!(out, raw.as_bytes(), "byte-identical after gunzip");

    // What Redis holds is the compressed form.
    let keys: Vec<String> = shop.server.conn().await.keys("cache:*").await.unwrap();
    let stored: usize = shop.server.conn().await.strlen(&keys[0]).await.unwrap();
    assert!(stored < raw.len() / 5, "stored {stored} of {}", raw.len());
}

#[tokio::test]
async fn a_matching_etag_gets_304() {
    let shop = Shop::start().await;
    shop.rank_items(5).await;
    let first = shop.get("/items/5").await;
    let etag = first.headers()[header::ETAG].clone();
    let req = |inm: &str| {
        Request::get("/items/5")
            .header(header::IF_NONE_MATCH, inm)
            .body(Body::empty())
            .unwrap()
    };
    let not_modified = shop.send(req(etag.to_str().unwrap())).await;
    assert_eq!(not_modified.status(), StatusCode::NOT_MODIFIED);
    assert_eq!(not_modified.headers()[header::ETAG], etag);
    assert!(body(not_modified).await.is_empty());
    let changed = shop.send(req("\"something-else\"")).await;
    assert_eq!(changed.status(), StatusCode::OK);
    // The gzip form is another representation, with its own ETag: a client
    // (or a cache) that names it gets a 304 only when it would get gzip.
    let gzip = |inm: Option<&str>| {
        let mut req = Request::get("/items/5").header(header::ACCEPT_ENCODING, "gzip");
        if let Some(inm) = inm {
            req = req.header(header::IF_NONE_MATCH, inm);
        }
        req.body(Body::empty()).unwrap()
    };
    let zipped = shop.send(gzip(None)).await;
    assert_eq!(zipped.headers()[header::CONTENT_ENCODING], "gzip");
    let zipped_etag = zipped.headers()[header::ETAG].to_str().unwrap().to_owned();
    assert_ne!(zipped_etag, etag.to_str().unwrap());
    let not_modified = shop.send(gzip(Some(&zipped_etag))).await;
    assert_eq!(not_modified.status(), StatusCode::NOT_MODIFIED);
    assert_eq!(not_modified.headers()[header::ETAG], zipped_etag.as_str());
    let plain = shop.send(req(&zipped_etag)).await;
    assert_eq!(
        plain.status(),
        StatusCode::OK,
        "not the form this client gets"
    );
    assert_eq!(plain.headers()[header::ETAG], etag);
    assert!(!body(plain).await.is_empty());
    let zipped = shop.send(gzip(Some(etag.to_str().unwrap()))).await;
    assert_eq!(zipped.status(), StatusCode::OK);
    assert_eq!(shop.renders(), 1);
}

#[tokio::test]
async fn head_is_served_from_the_get_entry_without_a_body() {
    let shop = Shop::start().await;
    shop.rank_items(5).await;
    shop.get("/items/1").await;
    let head = shop
        .send(Request::head("/items/1").body(Body::empty()).unwrap())
        .await;
    assert_eq!(x_cache(&head), "HIT");
    assert!(body(head).await.is_empty());
    assert_eq!(shop.renders(), 1);
}

#[tokio::test]
async fn only_the_headers_a_page_varies_on_change_the_key() {
    let config = PageCacheConfig {
        vary: vec![header::ACCEPT_LANGUAGE],
        ..PageCacheConfig::new(shop_web::page_cache::ITEMS)
    };
    let shop = Shop::with(config, Duration::ZERO).await;
    shop.rank_items(5).await;
    let req = |lang: &str, agent: &str| {
        Request::get("/items/1")
            .header(header::ACCEPT_LANGUAGE, lang)
            .header(header::USER_AGENT, agent)
            .body(Body::empty())
            .unwrap()
    };
    assert_eq!(x_cache(&shop.send(req("en", "a")).await), "MISS");
    assert_eq!(x_cache(&shop.send(req("en", "b")).await), "HIT");
    assert_eq!(x_cache(&shop.send(req("de", "a")).await), "MISS");
    assert_eq!(shop.stored_pages().await, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stampede_on_a_cold_page_renders_it_once() {
    let shop = Shop::with(
        PageCacheConfig::new(shop_web::page_cache::ITEMS),
        Duration::from_millis(200),
    )
    .await;
    shop.rank_items(5).await;
    let requests = (0..100).map(|_| shop.get("/items/2"));
    let responses = futures::future::join_all(requests).await;
    assert_eq!(shop.renders(), 1, "the handler ran once for 100 requests");
    let mut misses = 0;
    for resp in responses {
        assert_eq!(resp.status(), StatusCode::OK);
        misses += usize::from(x_cache(&resp) == "MISS");
        assert_eq!(body(resp).await, page_body("2").as_bytes());
    }
    assert_eq!(misses, 1);
    // Single-flight inside the process: one lock attempt and one store reached Redis,
    // not one lock attempt per request.
    let stats: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(&mut shop.server.conn().await)
        .await
        .unwrap();
    let set_calls = stats
        .lines()
        .find_map(|l| l.strip_prefix("cmdstat_set:calls="))
        .and_then(|l| l.split(',').next())
        .unwrap();
    assert_eq!(set_calls, "2", "{stats}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stampede_across_processes_renders_once() {
    // Two layers with their own single-flight maps, as two web servers would have.
    let one = Shop::with(
        PageCacheConfig::new(shop_web::page_cache::ITEMS),
        Duration::from_millis(300),
    )
    .await;
    one.rank_items(5).await;
    let conn = shop_cache::connect(&one.server.url()).await.unwrap();
    let store = PageStore::new(conn, &Keys::default(), DEFAULT_TTL)
        .ranked(Keys::default().item_views(), DEFAULT_RANK_LIMIT);
    let other_layer = PageCacheLayer::new(store, PageCacheConfig::new(shop_web::page_cache::ITEMS));
    let other = app(
        &other_layer,
        one.renders.clone(),
        Arc::default(),
        Duration::from_millis(300),
    );

    let a = (0..40).map(|_| one.get("/items/3"));
    let b = (0..40).map(|_| {
        other
            .clone()
            .oneshot(Request::get("/items/3").body(Body::empty()).unwrap())
    });
    let (a, b) = tokio::join!(futures::future::join_all(a), futures::future::join_all(b));
    assert_eq!(one.renders(), 1, "one render for both processes");
    for resp in b {
        assert_eq!(resp.unwrap().status(), StatusCode::OK);
    }
    for resp in a {
        assert_eq!(resp.status(), StatusCode::OK);
    }
}

#[tokio::test]
async fn a_waiter_renders_itself_when_the_render_is_not_storable() {
    let shop = Shop::with(
        PageCacheConfig::new(shop_web::page_cache::ITEMS),
        Duration::from_millis(100),
    )
    .await;
    shop.rank_items(5).await;
    let requests = (0..5).map(|_| shop.get("/items/2?mode=cookie"));
    for resp in futures::future::join_all(requests).await {
        assert_eq!(resp.status(), StatusCode::OK);
        assert!(resp.headers().contains_key(header::SET_COOKIE));
    }
    assert_eq!(shop.renders(), 5, "a personal page is never shared");
}

#[tokio::test]
async fn with_redis_down_the_page_still_comes_from_the_handler() {
    let mut shop = Shop::start().await;
    shop.rank_items(5).await;
    shop.get("/items/1").await;
    shop.server.kill();
    for _ in 0..3 {
        let resp = shop.get("/items/1").await;
        assert_eq!(resp.status(), StatusCode::OK);
        assert_eq!(x_cache(&resp), "BYPASS");
        assert_eq!(body(resp).await, page_body("1").as_bytes());
    }
    assert_eq!(shop.renders(), 4);
    assert!(shop.layer.stats().errors.load(Ordering::Relaxed) >= 3);
}

#[tokio::test]
async fn shared_pages_are_cached_without_a_rank_gate() {
    let config = PageCacheConfig {
        pages: Pages::Shared,
        ..PageCacheConfig::new(shop_web::page_cache::ITEMS)
    };
    let shop = Shop::with(config, Duration::ZERO).await;
    // No views at all: a shared page (the flash-sale shell) is cached anyway.
    assert_eq!(x_cache(&shop.get("/cart").await), "MISS");
    assert_eq!(x_cache(&shop.get("/cart").await), "HIT");
    assert_eq!(x_cache(&shop.get_bypassing("/cart?_=1").await), "BYPASS");
    assert_eq!(shop.renders(), 2);
}

#[tokio::test]
async fn a_page_rendered_across_a_purge_is_served_but_not_stored() {
    let shop = Shop::with(reads_params(), Duration::from_millis(300)).await;
    shop.rank_items(5).await;
    let conn = shop_cache::connect(&shop.server.url()).await.unwrap();
    let purger = PageStore::new(conn, &Keys::default(), DEFAULT_TTL)
        .ranked(Keys::default().item_views(), DEFAULT_RANK_LIMIT);
    // The render begins (it read the purge epoch, then its data) ...
    let app = shop.app.clone();
    let request = tokio::spawn(async move {
        app.oneshot(Request::get("/items/3").body(Body::empty()).unwrap())
            .await
            .unwrap()
    });
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while shop.renders() == 0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the render never began"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // ... the item changes and is purged while it renders ...
    purger.purge(&[PageTag::item(3)]).await.unwrap();
    // ... and a request after the purge joins the render still under way ...
    let app = shop.app.clone();
    let after_purge = tokio::spawn(async move {
        app.oneshot(Request::get("/items/3").body(Body::empty()).unwrap())
            .await
            .unwrap()
    });
    // ... so what it rendered is served to its own request, but never stored,
    // nor handed to the later request, which renders the page itself.
    let resp = request.await.unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(x_cache(&resp), "MISS");
    let later = after_purge.await.unwrap();
    assert_eq!(
        x_cache(&later),
        "MISS",
        "not the render from before the purge"
    );
    assert_eq!(shop.renders(), 2);
    assert_eq!(
        x_cache(&shop.get("/items/3").await),
        "HIT",
        "its own render is kept"
    );
}

/// A store whose pages are fresh for three seconds (long enough that a test's
/// steps after a render see it fresh, even on a busy machine), then served stale
/// as `grace` says.
fn brief(grace: StaleGrace) -> impl FnOnce(shop_cache::RedisConn) -> PageStore {
    move |conn| {
        PageStore::new(conn, &Keys::default(), Duration::from_secs(3))
            .ranked(Keys::default().item_views(), DEFAULT_RANK_LIMIT)
            .with_stale(grace)
    }
}

/// The answer's `Age`, in seconds.
fn age(resp: &Response) -> u64 {
    resp.headers()[header::AGE]
        .to_str()
        .unwrap()
        .parse()
        .unwrap()
}

/// GETs `uri` until `done` holds of the answer (or fails after ten seconds).
async fn until(shop: &Shop, uri: &str, done: impl Fn(&Response) -> bool) -> Response {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let resp = shop.get(uri).await;
        if done(&resp) {
            return resp;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "last: {} {:?}",
            resp.status(),
            resp.headers().get("x-cache")
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn an_expired_page_is_served_while_one_request_across_two_servers_renders_it() {
    let grace = StaleGrace {
        while_revalidate: Duration::from_secs(60),
        if_error: Duration::ZERO,
    };
    let delay = Duration::from_millis(200);
    let one = Shop::on_store(TestRedis::start(), reads_params(), delay, brief(grace)).await;
    // Another web server over the same Redis, with its own handler.
    let conn = shop_cache::connect(&one.server.url()).await.unwrap();
    let layer = PageCacheLayer::new(brief(grace)(conn), reads_params());
    let two_renders = Arc::new(AtomicUsize::new(0));
    let two = app(&layer, two_renders.clone(), Arc::default(), delay);
    let get_two = |uri: &'static str| {
        let two = two.clone();
        async move {
            two.oneshot(Request::get(uri).body(Body::empty()).unwrap())
                .await
                .unwrap()
        }
    };
    one.rank_items(3).await;
    assert_eq!(x_cache(&one.get("/items/2").await), "MISS");
    // Expired: both servers serve the old copy at once, many times over ...
    let stale = until(&one, "/items/2", |r| x_cache(r) == "STALE").await;
    assert_eq!(stale.status(), StatusCode::OK);
    // Older than its 3 s TTL, and says so: an edge keeps it no longer.
    assert!(age(&stale) >= 3, "{:?}", stale.headers());
    assert!(!body(stale).await.is_empty());
    for _ in 0..3 {
        for resp in [one.get("/items/2").await, get_two("/items/2").await] {
            assert!(
                matches!(x_cache(&resp), "STALE" | "HIT"),
                "{:?}",
                resp.headers()
            );
        }
    }
    // ... while exactly one render, on one of them, brings it back fresh.
    until(&one, "/items/2", |r| x_cache(r) == "HIT").await;
    assert_eq!(x_cache(&get_two("/items/2").await), "HIT");
    assert_eq!(
        one.renders() + two_renders.load(Ordering::SeqCst),
        2,
        "the first render and one revalidation"
    );
}

#[tokio::test]
async fn an_expired_page_is_served_instead_of_an_error_while_it_cannot_be_rendered() {
    let grace = StaleGrace {
        while_revalidate: Duration::ZERO,
        if_error: Duration::from_secs(60),
    };
    let shop = Shop::on_store(
        TestRedis::start(),
        reads_params(),
        Duration::ZERO,
        brief(grace),
    )
    .await;
    shop.rank_items(3).await;
    let fresh = shop.get("/items/1").await;
    assert_eq!(x_cache(&fresh), "MISS");
    let fresh = body(fresh).await;
    shop.failing.store(true, Ordering::SeqCst);
    // Expired, and the handler answers 503: the stale copy is served instead.
    let stale = until(&shop, "/items/1", |r| x_cache(r) == "STALE").await;
    assert_eq!(stale.status(), StatusCode::OK);
    assert_eq!(body(stale).await, fresh);
    // A page that was never cached has no copy: the error, at once.
    assert_eq!(
        shop.get("/items/2").await.status(),
        StatusCode::SERVICE_UNAVAILABLE
    );
    // Back up: rendered and fresh again.
    shop.failing.store(false, Ordering::SeqCst);
    assert_eq!(x_cache(&shop.get("/items/1").await), "MISS");
    assert_eq!(x_cache(&shop.get("/items/1").await), "HIT");
}
