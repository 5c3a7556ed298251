//! Sessions through the router: the cookie a visitor gets, cookies that are not
//! ours, the views a session records, and cross-site posts refused.

use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use redis::AsyncCommands;
use shop_cache::session::SessionToken;
use shop_testapp::{TestApp, cookie_of};
use shop_web::WebConfig;

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
