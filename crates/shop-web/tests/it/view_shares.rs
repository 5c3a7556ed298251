//! One client address's share of the item views that count: past it, its views
//! are served as before but enter neither the `viewed:` ranking nor a history,
//! whether they come without a cookie, with a session, or as `/api/me?item=`;
//! another address's views still count.

use axum::http::{StatusCode, header};
use axum::response::Response;
use redis::AsyncCommands;
use shop_testapp::{TestApp, get_request, json};
use shop_web::WebConfig;

const BROWSER: &str = "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.0.0 Safari/537.36";

async fn get_as(app: &TestApp, from: &str, uri: &str, cookie: Option<&str>) -> Response {
    let mut req = get_request(uri);
    let headers = req.headers_mut();
    headers.insert("x-forwarded-for", from.parse().unwrap());
    headers.insert(header::USER_AGENT, BROWSER.parse().unwrap());
    if let Some(cookie) = cookie {
        headers.insert(header::COOKIE, cookie.parse().unwrap());
    }
    app.send(req).await
}

async fn views_of(app: &TestApp, item: u64) -> f64 {
    app.flush_views().await;
    let score: Option<f64> = app
        .redis
        .conn()
        .await
        .zscore(app.keys.item_views(), item)
        .await
        .unwrap();
    -score.unwrap_or(0.0)
}

#[tokio::test]
async fn an_address_counts_only_its_share_of_views() {
    let app = TestApp::with_config(WebConfig {
        counted_views_per_minute: 5,
        uncached_per_address: 1_000_000,
        trust_forwarded_for: true,
        ..WebConfig::default()
    })
    .await;

    // Without a cookie: 30 views served, 5 counted; another address's count.
    for _ in 0..30 {
        let resp = get_as(&app, "198.51.100.1", "/items/4", None).await;
        assert_eq!(resp.status(), StatusCode::OK);
    }
    assert_eq!(views_of(&app, 4).await, 5.0);
    get_as(&app, "198.51.100.2", "/items/4", None).await;
    assert_eq!(views_of(&app, 4).await, 6.0, "another address's view");

    // With a session: the history holds only the views that counted.
    let visitor = app.visitor().await;
    for id in 10..18 {
        let resp = get_as(
            &app,
            "198.51.100.3",
            &format!("/items/{id}"),
            Some(&visitor),
        )
        .await;
        assert_eq!(resp.status(), StatusCode::OK);
    }
    app.flush_views().await;
    let me = json(get_as(&app, "198.51.100.4", "/api/me", Some(&visitor)).await).await;
    let recent: Vec<u64> = me["recently_viewed"]
        .as_array()
        .unwrap()
        .iter()
        .map(|item| item["id"].as_u64().unwrap())
        .collect();
    assert_eq!(recent, [14, 13, 12, 11, 10], "{me}");
    assert_eq!(views_of(&app, 14).await, 1.0);
    assert_eq!(views_of(&app, 15).await, 0.0, "past the share");

    // The per-user call naming an item (behind an edge) the same.
    let other = app.visitor().await;
    for _ in 0..12 {
        let resp = get_as(&app, "198.51.100.5", "/api/me?item=20", Some(&other)).await;
        assert_eq!(resp.status(), StatusCode::OK);
    }
    assert_eq!(views_of(&app, 20).await, 5.0);
}
