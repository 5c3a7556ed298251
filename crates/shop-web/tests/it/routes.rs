//! The whole router, without a socket: every route, cookies, forms, login, checkout,
//! errors, and Redis going away. Each test has its own redis-server and SQLite file.

use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use axum::response::Response;
use redis::AsyncCommands;
use shop_cache::session::SessionToken;
use shop_web::WebConfig;

use shop_testapp::{TestApp, cookie_of, json, text};

fn content_type(resp: &Response) -> &str {
    resp.headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
}

/// A guest cookie with two of item 7 in its cart, about to log in to the new
/// account `name` (password `right-pw`).
async fn guest_with_two_of_item_7(app: &TestApp, name: &str) -> String {
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
        ("/metrics", 200, "text/plain"),
        ("/static/shop.js", 200, "text/javascript"),
        ("/static/shop.css", 200, "text/css"),
        ("/no-such-page", 404, "text/html"),
    ] {
        let resp = app.get(uri, Some(&cookie)).await;
        assert_eq!(resp.status().as_u16(), status, "{uri}");
        assert!(
            content_type(&resp).starts_with(kind),
            "{uri}: {}",
            content_type(&resp)
        );
    }
    let resp = app.get("/account", Some(&cookie)).await;
    assert_eq!(resp.headers()[header::LOCATION], "/login?next=/account");
}

#[tokio::test]
async fn a_new_visitor_gets_a_safe_cookie_once() {
    let app = TestApp::start().await;
    let first = app.get("/", None).await;
    let set = first.headers()[header::SET_COOKIE]
        .to_str()
        .unwrap()
        .to_owned();
    assert!(set.starts_with("shop_session="), "{set}");
    for flag in ["HttpOnly", "SameSite=Lax", "Path=/"] {
        assert!(set.contains(flag), "{set}");
    }
    assert!(!set.contains("Secure"));
    let cookie = cookie_of(&first).unwrap();
    let again = app.get("/cart", Some(&cookie)).await;
    assert!(
        cookie_of(&again).is_none(),
        "a known session keeps its cookie"
    );

    let secure = TestApp::with_config(WebConfig {
        secure_cookies: true,
        ..WebConfig::default()
    })
    .await;
    let resp = secure.get("/", None).await;
    assert!(
        resp.headers()[header::SET_COOKIE]
            .to_str()
            .unwrap()
            .contains("; Secure")
    );
}

#[tokio::test]
async fn malformed_and_unknown_cookies_are_treated_as_none() {
    let app = TestApp::start().await;
    let unknown = format!("shop_session={}", SessionToken::generate().expose());
    for bad in [
        "shop_session=not-a-token".to_owned(),
        format!("shop_session={}", "A".repeat(5000)),
        unknown.clone(),
    ] {
        let resp = app.get("/cart", Some(&bad)).await;
        assert_eq!(resp.status(), StatusCode::OK);
        let issued = cookie_of(&resp).expect("a fresh cookie");
        assert_ne!(issued, bad);
    }
    // The unknown token was not adopted as a session.
    let tokens: Vec<String> = app
        .redis
        .conn()
        .await
        .zrange("recent:", 0, -1)
        .await
        .unwrap();
    assert!(!tokens.iter().any(|t| unknown.ends_with(t.as_str())));
}

#[tokio::test]
async fn item_views_are_recorded_for_real_items_only() {
    let app = TestApp::start().await;
    let cookie = app.visitor().await;
    assert_eq!(
        app.get("/items/3", Some(&cookie)).await.status(),
        StatusCode::OK
    );
    assert_eq!(
        app.get("/items/4", Some(&cookie)).await.status(),
        StatusCode::OK
    );
    assert_eq!(
        app.get("/items/999", Some(&cookie)).await.status(),
        StatusCode::NOT_FOUND
    );
    let me = app.me(&cookie).await;
    let viewed: Vec<u64> = me["recently_viewed"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["id"].as_u64().unwrap())
        .collect();
    assert_eq!(viewed, vec![4, 3]);
    app.flush_views().await;
    let mut raw = app.redis.conn().await;
    let score: Option<f64> = raw.zscore("viewed:", 3).await.unwrap();
    assert_eq!(score, Some(-1.0));
    let ghost: Option<f64> = raw.zscore("viewed:", 999).await.unwrap();
    assert_eq!(ghost, None, "an unknown item is not ranked");
}

#[tokio::test]
async fn the_cart_form_adds_updates_and_removes() {
    let app = TestApp::start().await;
    let cookie = app.visitor().await;
    let resp = app
        .post("/cart", Some(&cookie), "item=3&count=2", false)
        .await;
    assert_eq!(resp.status(), StatusCode::SEE_OTHER);
    assert_eq!(resp.headers()[header::LOCATION], "/cart");
    app.post("/cart", Some(&cookie), "item=5&count=1", false)
        .await;
    assert_eq!(app.me(&cookie).await["cart"]["count"], 3);

    let resp = app
        .post("/cart", Some(&cookie), "item=3&count=4", true)
        .await;
    assert_eq!(resp.status(), StatusCode::OK);
    let body = json(resp).await;
    assert_eq!(
        body["cart"][0],
        serde_json::json!({"item": 3, "quantity": 4})
    );

    app.post("/cart", Some(&cookie), "item=3&count=0", false)
        .await;
    let me = app.me(&cookie).await;
    assert_eq!(
        me["cart"]["lines"],
        serde_json::json!([{"item": 5, "quantity": 1}])
    );
    let page = text(app.get("/cart", Some(&cookie)).await).await;
    assert!(
        page.contains("/items/5") && !page.contains("/items/3\""),
        "{page}"
    );
}

#[tokio::test]
async fn bad_cart_input_is_a_4xx_and_changes_nothing() {
    let app = TestApp::start().await;
    let cookie = app.visitor().await;
    app.post("/cart", Some(&cookie), "item=3&count=2", false)
        .await;
    let before = app.me(&cookie).await["cart"].clone();
    for (form, status, says) in [
        ("item=3&count=abc", 400, "whole number"),
        ("item=3&count=100", 400, "at most 99"),
        ("item=3&count=99999999999999999999999", 400, "whole number"),
        ("item=999&count=1", 404, "no such item"),
        ("item=abc&count=1", 400, "item"),
        ("item=0&count=1", 400, "item"),
        ("count=1", 400, "item"),
        ("item=3", 400, "count"),
    ] {
        let resp = app.post("/cart", Some(&cookie), form, false).await;
        assert_eq!(resp.status().as_u16(), status, "{form}");
        assert!(
            content_type(&resp).starts_with("text/html"),
            "{form}: a page for a person"
        );
        let page = text(resp).await;
        assert!(page.contains(says), "{form}: {page}");
        let resp = app.post("/cart", Some(&cookie), form, true).await;
        assert_eq!(resp.status().as_u16(), status, "{form}");
        assert!(json(resp).await["message"].as_str().unwrap().contains(says));
    }
    assert_eq!(
        app.me(&cookie).await["cart"],
        before,
        "the cart is unchanged"
    );
}

#[tokio::test]
async fn cross_site_posts_are_refused() {
    let app = TestApp::start().await;
    let cookie = app.visitor().await;
    let post = |headers: &[(&str, &str)]| {
        let mut req = Request::post("/cart")
            .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
            .header(header::COOKIE, cookie.as_str())
            .header(header::HOST, "shop.example");
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        req.body(Body::from("item=3&count=1")).unwrap()
    };
    assert_eq!(
        app.send(post(&[("sec-fetch-site", "cross-site")]))
            .await
            .status(),
        StatusCode::FORBIDDEN
    );
    assert_eq!(
        app.send(post(&[("sec-fetch-site", "same-site")]))
            .await
            .status(),
        StatusCode::FORBIDDEN
    );
    assert_eq!(
        app.send(post(&[("origin", "http://evil.example")]))
            .await
            .status(),
        StatusCode::FORBIDDEN
    );
    assert_eq!(
        app.me(&cookie).await["cart"]["count"],
        0,
        "nothing was added"
    );
    assert_eq!(
        app.send(post(&[("sec-fetch-site", "same-origin")]))
            .await
            .status(),
        StatusCode::SEE_OTHER
    );
    assert_eq!(
        app.send(post(&[("origin", "http://shop.example")]))
            .await
            .status(),
        StatusCode::SEE_OTHER
    );
    assert_eq!(app.me(&cookie).await["cart"]["count"], 1, "set, not added");
}

#[tokio::test]
async fn login_rotates_the_token_and_keeps_the_cart() {
    let app = TestApp::start().await;
    let guest = guest_with_two_of_item_7(&app, "walt").await;

    let wrong = app
        .post("/login", Some(&guest), "name=walt&password=nope", false)
        .await;
    assert_eq!(wrong.status(), StatusCode::UNAUTHORIZED);
    assert!(text(wrong).await.contains("Wrong name or password"));
    let unknown = app
        .post("/login", Some(&guest), "name=nobody&password=nope", true)
        .await;
    assert_eq!(unknown.status(), StatusCode::UNAUTHORIZED);
    assert_eq!(
        app.post("/login", Some(&guest), "name=&password=", false)
            .await
            .status(),
        StatusCode::BAD_REQUEST
    );

    let resp = app
        .post(
            "/login",
            Some(&guest),
            "name=walt&password=right-pw&next=/cart",
            false,
        )
        .await;
    assert_eq!(resp.status(), StatusCode::SEE_OTHER);
    assert_eq!(resp.headers()[header::LOCATION], "/cart");
    let user = cookie_of(&resp).unwrap();
    assert_ne!(user, guest);
    let me = app.me(&user).await;
    assert_eq!(me["user"]["name"], "walt");
    assert_eq!(
        me["cart"]["lines"],
        serde_json::json!([{"item": 7, "quantity": 2}])
    );
    // The old token is dead: it is not logged in, and holds no cart.
    let old = app.get("/api/me", Some(&guest)).await;
    assert!(
        cookie_of(&old).is_some(),
        "the old token is unknown now: a fresh one is issued"
    );
    let old = json(old).await;
    assert_eq!(old["user"], serde_json::Value::Null);
    assert_eq!(old["cart"]["count"], 0);
    // An outside `next` is refused before anything changes.
    app.db.create_user("vera", "pw").await.unwrap().unwrap();
    let resp = app
        .post(
            "/login",
            Some(&user),
            "name=vera&password=pw&next=//evil.example",
            false,
        )
        .await;
    assert_eq!(resp.status(), StatusCode::BAD_REQUEST);
    assert_eq!(app.me(&user).await["user"]["name"], "walt", "still walt");
}

#[tokio::test]
async fn logout_ends_the_session() {
    let app = TestApp::start().await;
    let user = app.logged_in("lena").await;
    let resp = app.post("/logout", Some(&user), "", false).await;
    assert_eq!(resp.status(), StatusCode::SEE_OTHER);
    let guest = cookie_of(&resp).expect("a new guest cookie");
    assert_eq!(app.me(&guest).await["user"], serde_json::Value::Null);
    assert_eq!(
        app.get("/account", Some(&user)).await.status(),
        StatusCode::SEE_OTHER
    );
}

#[tokio::test]
async fn checkout_turns_the_cart_into_one_order() {
    let app = TestApp::start().await;
    let guest = app.visitor().await;
    app.post("/cart", Some(&guest), "item=2&count=1", false)
        .await;
    let resp = app.post("/checkout", Some(&guest), "key=k1", false).await;
    assert_eq!(
        resp.headers()[header::LOCATION],
        "/login?next=/cart",
        "guests log in first"
    );

    let user = app.logged_in("olga").await;
    assert_eq!(
        app.post("/checkout", Some(&user), "key=k1", false)
            .await
            .status(),
        StatusCode::BAD_REQUEST,
        "empty cart"
    );
    app.post("/cart", Some(&user), "item=2&count=3", false)
        .await;
    app.post("/cart", Some(&user), "item=4&count=1", false)
        .await;
    let page = text(app.get("/cart", Some(&user)).await).await;
    let key = page
        .split("name=\"key\" value=\"")
        .nth(1)
        .unwrap()
        .split('"')
        .next()
        .unwrap()
        .to_owned();
    assert_eq!(
        app.post("/checkout", Some(&user), "", false).await.status(),
        StatusCode::BAD_REQUEST
    );

    let resp = app
        .post("/checkout", Some(&user), &format!("key={key}"), true)
        .await;
    assert_eq!(resp.status(), StatusCode::OK);
    let placed = json(resp).await;
    assert_eq!(placed["outcome"], "placed");
    assert_eq!(
        app.me(&user).await["cart"]["count"],
        0,
        "the cart is emptied"
    );
    // A repeated submit of the same form places nothing new.
    app.post("/cart", Some(&user), "item=2&count=1", false)
        .await;
    let again = json(
        app.post("/checkout", Some(&user), &format!("key={key}"), true)
            .await,
    )
    .await;
    assert_eq!(again["order_id"], placed["order_id"]);

    let orders: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM orders WHERE kind = 'cart'")
        .fetch_one(app.db.pool())
        .await
        .unwrap();
    assert_eq!(orders, 1);
    let lines = app
        .db
        .order_lines(placed["order_id"].as_i64().unwrap())
        .await
        .unwrap();
    let lines: Vec<(u64, i64)> = lines.iter().map(|(i, q, _)| (i.get(), *q)).collect();
    assert_eq!(lines, vec![(2, 3), (4, 1)]);
    let account = text(app.get("/account", Some(&user)).await).await;
    assert!(
        account.contains("Hello, olga") && account.contains(&format!("#{}", placed["order_id"]))
    );
}

#[tokio::test]
async fn checkout_refuses_more_than_the_stock() {
    let app = TestApp::start().await;
    let user = app.logged_in("pia").await;
    app.db
        .set_stock(shop_cache::domain::ItemId::new(6).unwrap(), 1)
        .await
        .unwrap();
    app.post("/cart", Some(&user), "item=6&count=2", false)
        .await;
    let resp = app.post("/checkout", Some(&user), "key=x1", true).await;
    assert_eq!(resp.status(), StatusCode::CONFLICT);
    assert_eq!(json(resp).await["error"], "out_of_stock");
    assert_eq!(
        app.me(&user).await["cart"]["count"],
        2,
        "the cart stays for the user to fix"
    );
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
        a.contains("/static/shop.js"),
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
    let metrics = text(app.get("/metrics", None).await).await;
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
    let body = text(app.get("/metrics", None).await).await;
    assert!(
        body.contains("shop_http_requests_total{route=\"/items/{id}\",status=\"200\"} 3"),
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
async fn insights_come_from_views_and_orders() {
    let app = TestApp::start().await;
    assert_eq!(
        app.get("/api/items/abc/insights", None).await.status(),
        StatusCode::BAD_REQUEST
    );
    assert_eq!(
        app.get("/api/items/999/insights", None).await.status(),
        StatusCode::NOT_FOUND
    );
    let empty = json(app.get("/api/items/9/insights", None).await).await;
    assert_eq!(
        empty,
        serde_json::json!({"item": 9, "viewers": 0, "buyers": 0,
            "viewed_then_bought_percent": 0.0, "also_bought": [],
            "window": "in the last two weeks"})
    );

    // Four shoppers view item 2; one of them buys it with item 4.
    let buyer = app.logged_in("rita").await;
    app.get("/items/2", Some(&buyer)).await;
    for _ in 0..3 {
        let other = app.visitor().await;
        app.get("/items/2", Some(&other)).await;
    }
    app.flush_views().await;
    app.post("/cart", Some(&buyer), "item=2&count=1", false)
        .await;
    app.post("/cart", Some(&buyer), "item=4&count=1", false)
        .await;
    let placed = app.post("/checkout", Some(&buyer), "key=ins-1", true).await;
    assert_eq!(placed.status(), StatusCode::OK);

    let got = json(app.get("/api/items/2/insights", None).await).await;
    assert_eq!(
        (got["viewers"].as_u64(), got["buyers"].as_u64()),
        (Some(4), Some(1)),
        "{got}"
    );
    assert_eq!(got["viewed_then_bought_percent"], 25.0);
    assert_eq!(got["also_bought"][0]["id"], 4);
    assert!(
        got["also_bought"][0]["title"]
            .as_str()
            .unwrap()
            .ends_with(" 4")
    );
}

#[tokio::test]
async fn a_failure_to_record_insights_does_not_fail_the_order() {
    let app = TestApp::start().await;
    let user = app.logged_in("sam").await;
    app.post("/cart", Some(&user), "item=3&count=1", false)
        .await;
    // Something else holds the key the order's insights go to.
    let _: () = app
        .redis
        .conn()
        .await
        .set(
            format!("buyers:3:{}", shop_cache::insights::current_window()),
            "not a hyperloglog",
        )
        .await
        .unwrap();
    let resp = app.post("/checkout", Some(&user), "key=k-ins", true).await;
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(json(resp).await["outcome"], "placed");
    let metrics = text(app.get("/metrics", None).await).await;
    assert!(metrics.contains("shop_insight_errors_total 1"), "{metrics}");
}

#[tokio::test]
async fn zero_and_negative_counts_remove_the_line() {
    let app = TestApp::start().await;
    let cookie = app.visitor().await;
    app.post("/cart", Some(&cookie), "item=3&count=2", false)
        .await;
    app.post("/cart", Some(&cookie), "item=5&count=1", false)
        .await;
    let resp = app
        .post("/cart", Some(&cookie), "item=3&count=-1", true)
        .await;
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(
        json(resp).await["cart"],
        serde_json::json!([{"item": 5, "quantity": 1}])
    );
    let resp = app
        .post("/cart", Some(&cookie), "item=5&count=-99999", false)
        .await;
    assert_eq!(resp.status(), StatusCode::SEE_OTHER);
    assert_eq!(app.me(&cookie).await["cart"]["count"], 0);
    // Removing an item that is not there (or does not exist) is harmless.
    let resp = app
        .post("/cart", Some(&cookie), "item=999&count=0", true)
        .await;
    assert_eq!(resp.status(), StatusCode::OK);
}

#[tokio::test]
async fn a_full_cart_refuses_another_item_with_409() {
    let app = TestApp::with_config(WebConfig {
        max_cart_lines: 3,
        ..WebConfig::default()
    })
    .await;
    let cookie = app.visitor().await;
    for item in 1..=3 {
        let resp = app
            .post(
                "/cart",
                Some(&cookie),
                &format!("item={item}&count=1"),
                true,
            )
            .await;
        assert_eq!(resp.status(), StatusCode::OK);
    }
    let resp = app
        .post("/cart", Some(&cookie), "item=4&count=1", true)
        .await;
    assert_eq!(resp.status(), StatusCode::CONFLICT);
    let body = json(resp).await;
    assert_eq!(body["error"], "cart_full");
    assert!(body["message"].as_str().unwrap().contains("at most 3"));
    assert_eq!(
        app.me(&cookie).await["cart"]["lines"]
            .as_array()
            .unwrap()
            .len(),
        3
    );
    // Changing a line already there still works.
    let resp = app
        .post("/cart", Some(&cookie), "item=2&count=5", true)
        .await;
    assert_eq!(resp.status(), StatusCode::OK);
}

#[tokio::test]
async fn random_query_parameters_do_not_bust_the_item_page_cache() {
    let app = TestApp::start().await;
    // Item 4 must rank for its page to be cached.
    let _: () = app
        .redis
        .conn()
        .await
        .zadd("viewed:", 4, -10)
        .await
        .unwrap();
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

#[tokio::test]
async fn next_must_be_a_path_on_this_site() {
    let app = TestApp::start().await;
    let guest = guest_with_two_of_item_7(&app, "nina").await;
    for next in [
        "%2F%09%2Fevil.host%2Fx",
        "%2F%0A%2Fevil.host",
        "%2F%5Cevil.host",
        "%2F%2Fevil.host",
        "https%3A%2F%2Fevil.host",
        "%2Fa%0Db",
    ] {
        let form = format!("name=nina&password=right-pw&next={next}");
        let resp = app.post("/login", Some(&guest), &form, false).await;
        assert_eq!(resp.status(), StatusCode::BAD_REQUEST, "{next}");
        assert!(resp.headers().get(header::LOCATION).is_none());
        assert!(cookie_of(&resp).is_none(), "{next}: no login happened");
        let form_page = app.get(&format!("/login?next={next}"), None).await;
        assert_eq!(form_page.status(), StatusCode::BAD_REQUEST, "{next}");
    }
    // Nothing changed: still the same guest, cart intact.
    let me = app.me(&guest).await;
    assert_eq!(me["user"], serde_json::Value::Null);
    assert_eq!(me["cart"]["count"], 2);
}

#[tokio::test]
async fn a_double_submitted_login_form_gives_both_answers_the_same_session() {
    let app = TestApp::start().await;
    let guest = guest_with_two_of_item_7(&app, "olga").await;
    let form = text(app.get("/login", Some(&guest)).await).await;
    let key = form
        .split("name=\"key\" value=\"")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .expect("the login form has a one-time key")
        .to_owned();
    let body = format!("name=olga&password=right-pw&key={key}");
    let first = app.post("/login", Some(&guest), &body, false).await;
    let second = app.post("/login", Some(&guest), &body, false).await;
    assert_eq!(first.status(), StatusCode::SEE_OTHER);
    assert_eq!(second.status(), StatusCode::SEE_OTHER);
    let (a, b) = (cookie_of(&first).unwrap(), cookie_of(&second).unwrap());
    assert_eq!(a, b, "one login, one session");
    assert_eq!(
        app.me(&a).await["cart"]["count"],
        2,
        "the cart is not orphaned"
    );
}

#[tokio::test]
async fn logging_in_as_someone_else_does_not_take_the_cart() {
    let app = TestApp::start().await;
    let alice = app.logged_in("alice2").await;
    app.post("/cart", Some(&alice), "item=7&count=2", false)
        .await;
    app.db.create_user("bob2", "bob-pw").await.unwrap().unwrap();
    let resp = app
        .post("/login", Some(&alice), "name=bob2&password=bob-pw", false)
        .await;
    assert_eq!(resp.status(), StatusCode::SEE_OTHER);
    let bob = cookie_of(&resp).unwrap();
    let me = app.me(&bob).await;
    assert_eq!(me["user"]["name"], "bob2");
    assert_eq!(me["cart"]["count"], 0, "alice's cart is not bob's");
}

#[tokio::test]
async fn login_attempts_are_limited_with_429_before_any_hashing() {
    let app = TestApp::with_config(WebConfig {
        login_limits: shop_cache::login_limit::LoginLimits {
            per_address: 100,
            per_name: 3,
            window: std::time::Duration::from_secs(60),
        },
        ..WebConfig::default()
    })
    .await;
    app.db
        .create_user("pat", "right-pw")
        .await
        .unwrap()
        .unwrap();
    let guest = app.visitor().await;
    for _ in 0..3 {
        let resp = app
            .post("/login", Some(&guest), "name=pat&password=wrong", true)
            .await;
        assert_eq!(resp.status(), StatusCode::UNAUTHORIZED);
    }
    let checks = app.db.password_checks();
    let resp = app
        .post("/login", Some(&guest), "name=pat&password=right-pw", true)
        .await;
    assert_eq!(resp.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(app.db.password_checks(), checks, "refused before hashing");
    let wait: u64 = resp.headers()[header::RETRY_AFTER]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!((1..=60).contains(&wait), "{wait}");
    assert!(cookie_of(&resp).is_none(), "not logged in");
    // Other accounts are not affected.
    app.db
        .create_user("quin", "right-pw")
        .await
        .unwrap()
        .unwrap();
    let resp = app
        .post("/login", Some(&guest), "name=quin&password=right-pw", true)
        .await;
    assert_eq!(resp.status(), StatusCode::OK);
}
