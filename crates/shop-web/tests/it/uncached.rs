//! The budget for uncached work and the search cache: one client address may make
//! the shop render or search only so much; cached pages and searches answered from
//! memory are never limited; a catalogue change empties the search cache at once.

use axum::http::{StatusCode, header};
use axum::response::Response;
use shop_cache::domain::ItemId;
use shop_cache::domain::catalogue::ItemEdit;
use shop_testapp::{TestApp, get_request, text};
use shop_web::WebConfig;
use tokio_util::sync::CancellationToken;

fn x_cache(resp: &Response) -> String {
    resp.headers()
        .get("x-cache")
        .map(|v| v.to_str().unwrap().to_owned())
        .unwrap_or_default()
}

/// A shop counting every client by `X-Forwarded-For`, `per_address` uncached
/// requests each per window, its tier's feed running (the search cache hears
/// purges through it).
async fn shop(per_address: u32, stop: &CancellationToken) -> TestApp {
    let config = WebConfig {
        uncached_per_address: per_address,
        trust_forwarded_for: true,
        ..WebConfig::default()
    };
    let app = TestApp::with_config(config).await;
    shop_testapp::run_tier_feed(&app.state, stop).await;
    app
}

async fn get_from(app: &TestApp, from: &str, uri: &str) -> Response {
    let mut req = get_request(uri);
    req.headers_mut()
        .insert("x-forwarded-for", from.parse().unwrap());
    app.send(req).await
}

#[tokio::test]
async fn an_address_past_its_budget_gets_429_and_cached_pages_still() {
    let stop = CancellationToken::new();
    let app = shop(5, &stop).await;
    let a = "198.51.100.7";
    // Item 3 is popular and cached (rendered once, by another address).
    app.rank(&[3]).await;
    assert_eq!(
        x_cache(&get_from(&app, "203.0.113.1", "/items/3").await),
        "MISS"
    );
    // Five renders of item pages nobody views (not cached), then 429.
    for id in 10..15 {
        let resp = get_from(&app, a, &format!("/items/{id}")).await;
        assert_eq!(resp.status(), StatusCode::OK, "item {id}");
        assert_eq!(x_cache(&resp), "BYPASS");
    }
    let refused = get_from(&app, a, "/items/15").await;
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
    let retry: u64 = refused.headers()[header::RETRY_AFTER]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!((1..=10).contains(&retry), "Retry-After {retry}");
    // Every other kind of uncached work is refused too: a deep listing page, an
    // insights miss, a search.
    for uri in [
        "/items?after=77",
        "/api/items/12/insights",
        "/search?q=lamp",
    ] {
        let resp = get_from(&app, a, uri).await;
        assert_eq!(resp.status(), StatusCode::TOO_MANY_REQUESTS, "{uri}");
    }
    // What is cached is never limited.
    for _ in 0..20 {
        let resp = get_from(&app, a, "/items/3").await;
        assert_eq!(resp.status(), StatusCode::OK);
        assert_eq!(x_cache(&resp), "HIT");
    }
    // Another address has its own budget; an IPv6 client is counted per /64.
    assert_eq!(
        get_from(&app, "203.0.113.9", "/items/15").await.status(),
        StatusCode::OK
    );
    for n in 0..5 {
        let from = format!("2001:db8:1:2::{n}");
        assert_eq!(
            get_from(&app, &from, "/items/20").await.status(),
            StatusCode::OK
        );
    }
    let same_64 = get_from(&app, "2001:db8:1:2::99", "/items/20").await;
    assert_eq!(same_64.status(), StatusCode::TOO_MANY_REQUESTS);
    let metrics = text(app.internal_get("/metrics").await).await;
    let refused: u64 = metrics
        .lines()
        .find_map(|l| l.strip_prefix("shop_uncached_refused_total "))
        .expect("the counter")
        .parse()
        .unwrap();
    assert_eq!(refused, 5);
    stop.cancel();
}

#[tokio::test]
async fn a_popular_search_is_answered_from_memory_until_the_catalogue_changes() {
    let stop = CancellationToken::new();
    let app = shop(3, &stop).await;
    let item = app.db.item(ItemId::new(3).unwrap()).await.unwrap().unwrap();
    let noun = item.title.split(' ').nth(1).unwrap().to_lowercase();
    let search = format!("/search?q={noun}");
    let first = get_from(&app, "203.0.113.1", &search).await;
    assert_eq!(first.status(), StatusCode::OK);
    assert_eq!(x_cache(&first), "MISS");
    let html = text(first).await;
    assert!(html.contains(&item.title), "{html}");
    // The same words, however typed, from an address whose budget is spent.
    let a = "198.51.100.7";
    for id in 10..13 {
        get_from(&app, a, &format!("/items/{id}")).await;
    }
    assert_eq!(
        get_from(&app, a, "/search?q=somethingelse").await.status(),
        StatusCode::TOO_MANY_REQUESTS
    );
    let upper = format!("/search?q={}!!", noun.to_uppercase());
    let cached = get_from(&app, a, &upper).await;
    assert_eq!(cached.status(), StatusCode::OK);
    assert_eq!(x_cache(&cached), "HIT");
    assert!(text(cached).await.contains(&item.title));

    // A change to the catalogue: the very next search reads the database.
    let edit = ItemEdit::new(Some(&format!("Brand new {noun}")), None, None, None).unwrap();
    app.state
        .catalogue()
        .update(item.id, &edit, None)
        .await
        .unwrap();
    let after = get_from(&app, "203.0.113.2", &search).await;
    assert_eq!(x_cache(&after), "MISS");
    let html = text(after).await;
    assert!(html.contains(&format!("Brand new {noun}")), "{html}");
    assert!(!html.contains(&item.title), "the old title is gone");
    stop.cancel();
}
