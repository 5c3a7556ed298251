//! The whole router, without a socket: every route answers, the same item HTML for
//! everyone, Redis going away, and the metrics; the helpers the route tests share.
//! Each test has its own redis-server and SQLite file. Sessions, the cart, logins
//! and the insights have files of their own.

use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use axum::response::Response;
use redis::AsyncCommands;

use shop_testapp::{TestApp, json, text};

pub fn content_type(resp: &Response) -> &str {
    resp.headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
}

/// A guest cookie with two of item 7 in its cart, about to log in to the new
/// account `name` (password `right-pw`).
pub async fn guest_with_two_of_item_7(app: &TestApp, name: &str) -> String {
    app.db.create_user(name, "right-pw").await.unwrap().unwrap();
    let guest = app.visitor().await;
    app.post("/cart", Some(&guest), "item=7&count=2", false)
        .await;
    guest
}

#[tokio::test]
async fn every_route_answers() {
    let app = TestApp::start().await;
    let cookie = app.visitor().await;
    for (uri, status, kind) in [
        ("/", 200, "text/html"),
        ("/items/1", 200, "text/html"),
        ("/items/999", 404, "text/html"),
        ("/items/abc", 404, "text/html"),
        ("/cart", 200, "text/html"),
        ("/login", 200, "text/html"),
        ("/signup", 200, "text/html"),
        ("/items", 200, "text/html"),
        ("/items?after=10", 200, "text/html"),
        ("/c/nope", 404, "text/html"),
        ("/search?q=lamp", 200, "text/html"),
        ("/account", 303, ""),
        ("/flash", 200, "text/html"),
        ("/api/me", 200, "application/json"),
        ("/api/inventory/1", 404, "application/json"),
        ("/healthz", 200, "application/json"),
        // Operators' data is not on the public address (see `internal_router`).
        ("/metrics", 404, "text/html"),
        ("/static/shop.js", 200, "text/javascript"),
        ("/static/shop.css", 200, "text/css"),
        // One URL a file: another spelling of it is none.
        ("/static/%73hop.css", 404, "text/html"),
        ("/favicon.ico", 200, "image/svg+xml"),
        ("/no-such-page", 404, "text/html"),
    ] {
        let resp = app.get(uri, Some(&cookie)).await;
        assert_eq!(resp.status().as_u16(), status, "{uri}");
        if content_type(&resp).starts_with("text/html") {
            // Every page names its icon and says what it is (search engines and
            // Lighthouse ask for both).
            let body = text(resp).await;
            assert!(
                body.contains("<meta name=\"description\" content=\""),
                "{uri}"
            );
            assert!(
                body.contains("<link rel=\"icon\" href=\"/favicon.ico\""),
                "{uri}"
            );
            continue;
        }
        assert!(
            content_type(&resp).starts_with(kind),
            "{uri}: {}",
            content_type(&resp)
        );
    }
    let resp = app.get("/account", Some(&cookie)).await;
    assert_eq!(resp.headers()[header::LOCATION], "/login?next=/account");
}

/// The public `/healthz` says the status and nothing else; `/metrics` and which
/// part is failing are on the operators' router only.
#[tokio::test]
async fn operators_data_is_only_on_the_internal_router() {
    let app = TestApp::start().await;
    let public = json(app.get("/healthz", None).await).await;
    assert_eq!(public, serde_json::json!({"status": "ok"}));
    assert_eq!(
        app.get("/metrics", None).await.status(),
        StatusCode::NOT_FOUND
    );
    let resp = app.internal_get("/metrics").await;
    assert_eq!(resp.status(), StatusCode::OK);
    assert!(content_type(&resp).starts_with("text/plain"));
    assert!(text(resp).await.contains("shop_sessions"));
    let detailed = json(app.internal_get("/healthz").await).await;
    assert_eq!(
        detailed,
        serde_json::json!({"status": "ok", "redis": true, "redis_failing_nodes": [], "database": "ok"})
    );
    // Nothing else is served there: no pages, no sessions.
    let resp = app.internal_get("/").await;
    assert_eq!(resp.status(), StatusCode::NOT_FOUND);
    assert!(resp.headers().get(header::SET_COOKIE).is_none());
}

#[tokio::test]
async fn item_html_is_the_same_for_everyone() {
    let app = TestApp::start().await;
    let user = app.logged_in("quinn").await;
    let guest = app.visitor().await;
    let a = text(app.get("/items/8", Some(&user)).await).await;
    let b = text(app.get("/items/8", Some(&guest)).await).await;
    assert_eq!(a, b);
    assert!(!a.contains("quinn"), "no personal data in the shared page");
    assert!(
        a.contains(&shop_web::assets::JS.url()),
        "the per-user parts come from the script"
    );
}

#[tokio::test]
async fn with_redis_down_pages_render_and_writes_say_503() {
    let mut app = TestApp::start().await;
    let cookie = app.visitor().await;
    app.redis.kill();
    let item = app.get("/items/2", Some(&cookie)).await;
    assert_eq!(
        item.status(),
        StatusCode::OK,
        "item pages come from the database"
    );
    assert!(text(item).await.contains("<h1>"));
    assert_eq!(app.get("/", Some(&cookie)).await.status(), StatusCode::OK);
    let add = app
        .post("/cart", Some(&cookie), "item=2&count=1", true)
        .await;
    assert_eq!(add.status(), StatusCode::SERVICE_UNAVAILABLE);
    let body = json(add).await;
    assert_eq!(body["error"], "unavailable");
    assert!(
        !body["message"].as_str().unwrap().contains("redis"),
        "no internals: {body}"
    );
    assert_eq!(
        app.get("/healthz", None).await.status(),
        StatusCode::SERVICE_UNAVAILABLE
    );
    // The breaker says so on /metrics.
    let metrics = text(app.internal_get("/metrics").await).await;
    assert!(metrics.contains("shop_redis_failing_fast 1"), "{metrics}");
    assert!(
        metrics.contains("shop_redis_breaker_trips_total 1"),
        "{metrics}"
    );
}

#[tokio::test]
async fn metrics_count_routes_cache_and_sessions() {
    let app = TestApp::start().await;
    let cookie = app.visitor().await;
    // Not ranked yet (bypass); ranked once the view is written (miss, then hit).
    for _ in 0..3 {
        app.get("/items/1", Some(&cookie)).await;
        app.flush_views().await;
    }
    // A per-user call refused for its query, before its session is touched,
    // is counted under its route all the same.
    let refused = app.get("/api/me?recent=many", Some(&cookie)).await;
    assert_eq!(refused.status(), StatusCode::BAD_REQUEST);
    // Answers no route gives (a path no route serves; a body too large by its
    // `Content-Length`, refused before any route) are counted apart.
    assert_eq!(
        app.get("/no/such/path", None).await.status(),
        StatusCode::NOT_FOUND
    );
    let too_large = Request::post("/cart")
        .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
        .header(header::CONTENT_LENGTH, "1000000")
        .body(Body::from(vec![b'a'; 1_000_000]))
        .unwrap();
    assert_eq!(
        app.send(too_large).await.status(),
        StatusCode::PAYLOAD_TOO_LARGE
    );
    // A route's own refusal (a form's route sent another type of body) is
    // counted under the route, once.
    let plain = Request::post("/cart")
        .header(header::CONTENT_TYPE, "text/plain")
        .body(Body::from("item=1"))
        .unwrap();
    assert_eq!(
        app.send(plain).await.status(),
        StatusCode::UNSUPPORTED_MEDIA_TYPE
    );
    let body = text(app.internal_get("/metrics").await).await;
    assert!(
        body.contains("shop_http_requests_total{route=\"/cart\",status=\"415\"} 1"),
        "{body}"
    );
    assert!(
        !body.contains("shop_http_requests_total{route=\"unrouted\",status=\"415\"}"),
        "counted once: {body}"
    );
    for status in ["404", "413"] {
        assert!(
            body.contains(&format!(
                "shop_http_requests_total{{route=\"unrouted\",status=\"{status}\"}} 1"
            )),
            "{status}: {body}"
        );
    }
    assert!(
        body.contains("shop_http_requests_total{route=\"/items/{id}\",status=\"200\"} 3"),
        "{body}"
    );
    assert!(
        body.contains("shop_http_requests_total{route=\"/api/me\",status=\"400\"} 1"),
        "{body}"
    );
    assert!(
        body.contains("shop_page_cache_total{page=\"item\",result=\"hit\"} 1"),
        "{body}"
    );
    assert!(body.contains("shop_sessions 1"), "{body}");
    assert!(body.contains("shop_http_request_duration_seconds_bucket{route=\"/items/{id}\",status=\"200\",le=\"+Inf\"} 3"));
    assert!(
        !body.contains(cookie.trim_start_matches("shop_session=")),
        "no tokens in metrics"
    );
}

#[tokio::test]
async fn random_query_parameters_do_not_bust_the_item_page_cache() {
    let app = TestApp::start().await;
    // Item 4 must rank for its page to be cached.
    app.rank(&[4]).await;
    let first = app.get("/items/4", None).await;
    assert_eq!(first.headers()["x-cache"], "MISS");
    for r in 0..20 {
        let resp = app.get(&format!("/items/4?r={r}"), None).await;
        assert_eq!(resp.headers()["x-cache"], "HIT", "r={r}");
    }
    let pages: Vec<String> = app.redis.conn().await.keys("cache:*").await.unwrap();
    assert_eq!(pages.len(), 1, "{pages:?}");
    // The flash-sale shell reads no parameter either.
    assert_eq!(
        app.get("/flash?r=a", None).await.headers()["x-cache"],
        "MISS"
    );
    for r in ["b", "c", "d"] {
        let resp = app.get(&format!("/flash?r={r}"), None).await;
        assert_eq!(resp.headers()["x-cache"], "HIT", "r={r}");
    }
    let pages: Vec<String> = app.redis.conn().await.keys("cache:*").await.unwrap();
    assert_eq!(pages.len(), 2, "{pages:?}");
}

/// A page for logged-in users (or admins) asked by a client that is not logged
/// in: a JSON client gets 401 `login_required` in the shop's shape, a person
/// the login page that comes back to the page.
#[tokio::test]
async fn pages_for_logged_in_users_answer_json_clients_401() {
    let app = TestApp::start().await;
    for uri in [
        "/account",
        "/ops",
        "/admin/items/1",
        "/account/password",
        "/account/orders/1",
    ] {
        let asked = Request::get(uri)
            .header(header::ACCEPT, "application/json")
            .body(Body::empty())
            .unwrap();
        let resp = app.send(asked).await;
        assert_eq!(resp.status(), StatusCode::UNAUTHORIZED, "{uri}");
        assert_eq!(json(resp).await["error"], "login_required", "{uri}");
        let resp = app.get(uri, None).await;
        assert_eq!(resp.status(), StatusCode::SEE_OTHER, "{uri}");
        assert_eq!(
            resp.headers()[header::LOCATION],
            format!("/login?next={uri}").as_str()
        );
    }
    let resp = app
        .post("/admin/items/1", None, "price_cents=1", true)
        .await;
    assert_eq!(resp.status(), StatusCode::UNAUTHORIZED);
}
