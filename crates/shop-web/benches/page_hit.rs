#![allow(missing_docs)] // criterion_group! generates undocumented items.
//! A cached item page through the page-cache layer against a private redis-server,
//! one request at a time (latency), next to the book's lookup (ZRANK, then GET: two
//! round trips) in the same run. Run: `cargo bench -p shop-web --bench page_hit`.

use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::http::{Request, header};
use axum::routing::get;
use criterion::{Criterion, criterion_group, criterion_main};
use http_body_util::BodyExt;
use redis::AsyncCommands;
use shop_cache::keys::Keys;
use shop_page_cache::{DEFAULT_RANK_LIMIT, DEFAULT_TTL, PageStore};
use shop_testkit::TestRedis;
use shop_web::page_cache::{PageCacheConfig, PageCacheLayer};
use tower::ServiceExt;

const PAGE: &str = include_str!("../../shop-page-cache/benches/fixtures/item_page.html");

async fn hit(app: &Router, gzip: bool) -> usize {
    let mut req = Request::get("/items/7");
    if gzip {
        req = req.header(header::ACCEPT_ENCODING, "gzip, deflate");
    }
    let resp = app
        .clone()
        .oneshot(req.body(Body::empty()).unwrap())
        .await
        .unwrap();
    assert_eq!(resp.headers()["x-cache"], "HIT");
    resp.into_body().collect().await.unwrap().to_bytes().len()
}

fn page_hit(c: &mut Criterion) {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let server = TestRedis::start();
    let (app, raw) = rt.block_on(async {
        let conn = shop_cache::connect(&server.url()).await.unwrap();
        let store = PageStore::new(conn, &Keys::default(), DEFAULT_TTL)
            .ranked(Keys::default().item_views(), DEFAULT_RANK_LIMIT);
        let app = Router::new()
            .route(
                "/items/{id}",
                get(|| async { ([(header::CONTENT_TYPE, "text/html")], PAGE) }),
            )
            .layer(PageCacheLayer::new(
                store,
                PageCacheConfig::new(shop_web::page_cache::ITEMS),
            ));
        let mut raw = server.conn().await;
        let _: () = raw.zadd("viewed:", 7, -100).await.unwrap();
        let _: () = raw.set("cache:book", PAGE).await.unwrap();
        app.clone()
            .oneshot(Request::get("/items/7").body(Body::empty()).unwrap())
            .await
            .unwrap();
        (app, raw)
    });

    let mut g = c.benchmark_group("cached_item_page");
    g.measurement_time(Duration::from_secs(5));
    g.bench_function("layer_hit_gzip_client", |b| {
        b.to_async(&rt).iter(|| hit(&app, true))
    });
    g.bench_function("layer_hit_plain_client", |b| {
        b.to_async(&rt).iter(|| hit(&app, false))
    });
    g.bench_function("book_zrank_then_get", |b| {
        b.to_async(&rt).iter(|| async {
            let mut raw = raw.clone();
            let rank: Option<u64> = raw.zrank("viewed:", 7).await.unwrap();
            assert!(rank.is_some());
            let page: Vec<u8> = raw.get("cache:book").await.unwrap();
            page.len()
        })
    });
    g.finish();
    drop(server);
}

criterion_group!(benches, page_hit);
criterion_main!(benches);
