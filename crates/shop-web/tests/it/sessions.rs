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
    let set = resp.headers()[header::SET_COOKIE].to_str().unwrap();
    assert!(
        set.starts_with("__Host-shop_session=") && set.contains("; Secure"),
        "{set}"
    );
    assert!(!set.contains("Domain"), "{set}");
    assert_eq!(
        resp.headers()[header::STRICT_TRANSPORT_SECURITY],
        "max-age=31536000"
    );
    assert!(
        app.get("/", None)
            .await
            .headers()
            .get(header::STRICT_TRANSPORT_SECURITY)
            .is_none(),
        "no HSTS over plain HTTP"
    );
}

/// A logged-in session past its lifetime is refused: its cookie is replaced, the
/// request is served as a new visitor's, and the old token stays worthless.
#[tokio::test]
async fn an_expired_session_gets_a_new_cookie_and_is_logged_out() {
    let app = TestApp::with_config(WebConfig {
        session_lifetimes: shop_cache::session::Lifetimes {
            absolute: std::time::Duration::from_secs(3600),
            ..Default::default()
        },
        ..WebConfig::default()
    })
    .await;
    // The item page's touch is held back and written by the next flush: checked
    // too (the expired session ends there, and the visitor's next request that
    // waits for its session starts afresh).
    for (name, path) in [("eve", "/api/me"), ("eva", "/items/1")] {
        let logged = app.logged_in(name).await;
        assert_eq!(app.me(&logged).await["user"]["name"], name);
        let token: SessionToken = logged.split_once('=').unwrap().1.parse().unwrap();
        // Logged in two hours ago, as far as Redis knows.
        let at = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs_f64()
            - 7200.0;
        let _: () = app
            .conn
            .clone()
            .zadd(app.keys.logins_of(&token), token.expose(), at)
            .await
            .unwrap();
        let resp = app.get(path, Some(&logged)).await;
        assert_eq!(resp.status(), StatusCode::OK, "{path}");
        if path == "/api/me" {
            let fresh = cookie_of(&resp).expect("a new cookie");
            assert_ne!(fresh, logged, "{path}");
        } else {
            assert!(
                cookie_of(&resp).is_none(),
                "the item page waits for no touch"
            );
            app.flush_views().await;
        }
        let user: Option<String> = app
            .conn
            .clone()
            .hget(app.keys.login_of(&token), token.expose())
            .await
            .unwrap();
        assert_eq!(user, None, "{path}: the login is gone from Redis");
        assert_eq!(
            app.me(&logged).await["user"],
            serde_json::Value::Null,
            "{path}"
        );
    }
}

/// Over HTTPS a sibling subdomain cannot plant the session: the plain
/// `shop_session` cookie is not read at all, only `__Host-shop_session`, which a
/// browser accepts only from the shop's own host, with `Secure` and `Path=/`.
#[tokio::test]
async fn over_https_a_planted_plain_cookie_is_ignored() {
    let app = TestApp::with_config(WebConfig {
        secure_cookies: true,
        ..WebConfig::default()
    })
    .await;
    let logged = app.logged_in("vic").await;
    assert!(logged.starts_with("__Host-shop_session="), "{logged}");
    assert_eq!(app.me(&logged).await["user"]["name"], "vic");
    // The same token under the plain name (as a sibling site would plant it).
    let token = logged.split_once('=').unwrap().1;
    let planted = format!("shop_session={token}");
    let resp = app.get("/api/me", Some(&planted)).await;
    assert!(
        cookie_of(&resp).is_some(),
        "treated as no cookie: a fresh one"
    );
    assert_eq!(
        shop_testapp::json(resp).await["user"],
        serde_json::Value::Null
    );
}

/// Behind a TLS proxy the shop trusts, `X-Forwarded-Proto: https` makes it serve
/// as over HTTPS; from anyone else the header changes nothing.
#[tokio::test]
async fn a_trusted_proxys_forwarded_proto_selects_the_https_cookie() {
    for (trust, want) in [(true, "__Host-shop_session="), (false, "shop_session=")] {
        let app = TestApp::with_config(WebConfig {
            trust_forwarded_for: trust,
            ..WebConfig::default()
        })
        .await;
        let req = Request::get("/")
            .header("x-forwarded-proto", "https")
            .body(Body::empty())
            .unwrap();
        let resp = app.send(req).await;
        let set = resp.headers()[header::SET_COOKIE].to_str().unwrap();
        assert!(set.starts_with(want), "trust {trust}: {set}");
        assert_eq!(
            resp.headers()
                .get(header::STRICT_TRANSPORT_SECURITY)
                .is_some(),
            trust
        );
    }
}

#[tokio::test]
async fn malformed_cookies_are_treated_as_none_and_an_unknown_token_starts_a_guest() {
    let app = TestApp::start().await;
    for bad in [
        "shop_session=not-a-token".to_owned(),
        format!("shop_session={}", "A".repeat(5000)),
    ] {
        let resp = app.get("/cart", Some(&bad)).await;
        assert_eq!(resp.status(), StatusCode::OK);
        let issued = cookie_of(&resp).expect("a fresh cookie");
        assert_ne!(issued, bad);
    }
    assert!(
        app.redis.all_keys().await.is_empty(),
        "no session for either"
    );
    // A well-formed token the shop does not know (a cleaned session, or the first
    // return of a cookie it handed out) is a guest session, with no other power.
    let unknown = SessionToken::generate();
    let cookie = format!("shop_session={}", unknown.expose());
    let resp = app.get("/api/me", Some(&cookie)).await;
    assert!(cookie_of(&resp).is_none(), "kept, not replaced");
    let me = shop_testapp::json(resp).await;
    assert_eq!(me["user"], serde_json::Value::Null);
    let guests: Vec<String> = app
        .redis
        .conn()
        .await
        .zrange("guests:", 0, -1)
        .await
        .unwrap();
    assert_eq!(guests, vec![unknown.expose().to_owned()]);
}

/// Keys that only a session writes.
fn is_session_state(key: &str) -> bool {
    ["recent:", "guests:", "login:", "logins:"].contains(&key)
        || key.starts_with("cart:")
        || (key.starts_with("viewed:") && key != "viewed:")
}

/// The crawler's case: requests that never send the cookie back write no session,
/// yet their views count in the ranking (and so in what the page cache keeps).
#[tokio::test]
async fn a_client_that_never_returns_cookies_creates_no_session() {
    let app = TestApp::start().await;
    for _ in 0..20 {
        for path in [
            "/", "/items/3", "/items/3", "/items", "/c/books", "/cart", "/api/me",
        ] {
            let resp = app.get(path, None).await;
            if resp.status() == StatusCode::OK {
                // Pages the same for everyone carry none: their `/api/me` does.
                let shared = resp
                    .headers()
                    .get("cache-control")
                    .is_some_and(|c| c.to_str().unwrap().starts_with("public"));
                let shared_page = ["/items/3", "/items", "/c/books"].contains(&path);
                assert_eq!(shared, shared_page, "{path}");
                assert_eq!(
                    cookie_of(&resp).is_some(),
                    !shared,
                    "{path}: a cookie is offered"
                );
                if !shared {
                    // What sets a cookie is this visitor's alone: no shared cache
                    // may keep it.
                    let control = resp.headers()["cache-control"].to_str().unwrap();
                    assert!(
                        control.contains("no-store") || control.contains("private"),
                        "{path}: {control}"
                    );
                }
            }
        }
        assert!(
            app.get("/items/999999", None)
                .await
                .status()
                .is_client_error()
        );
    }
    app.flush_views().await;
    let mut raw = app.redis.conn().await;
    let keys = app.redis.all_keys().await;
    for key in &keys {
        assert!(
            !is_session_state(key),
            "a cookieless request wrote session state: {key} (of {keys:?})"
        );
    }
    let views: Vec<(String, f64)> = raw.zrange_withscores("viewed:", 0, -1).await.unwrap();
    assert_eq!(
        views,
        vec![("3".to_owned(), -40.0)],
        "only found pages count"
    );

    // The cookie's first return starts the session, with that request's view
    // (the cookie from the page's `/api/me`: the page itself carries none).
    assert!(cookie_of(&app.get("/items/4", None).await).is_none());
    let cookie = cookie_of(&app.get("/api/me", None).await).unwrap();
    assert!(app.redis.all_keys().await.iter().all(|k| k != "recent:"));
    let resp = app.get("/items/5", Some(&cookie)).await;
    assert_eq!(resp.status(), StatusCode::OK);
    assert!(cookie_of(&resp).is_none());
    // (Its touch is held back for the process's next flush.)
    app.flush_views().await;
    let me = app.me(&cookie).await;
    assert_eq!(me["recently_viewed"][0]["id"], 5, "{me}");
    assert_eq!(me["recently_viewed"].as_array().unwrap().len(), 1, "{me}");
    let n: u64 = raw.zcard("recent:").await.unwrap();
    assert_eq!(n, 1);
}

/// A visitor whose very first request changes state (a cart line, a login) gets a
/// session for it at once.
#[tokio::test]
async fn a_first_request_that_fills_the_cart_starts_the_session() {
    let app = TestApp::start().await;
    let resp = app.post("/cart", None, "item=3&count=2", true).await;
    assert_eq!(resp.status(), StatusCode::OK);
    let cookie = cookie_of(&resp).expect("a cookie for the new session");
    let me = app.me(&cookie).await;
    assert_eq!(me["cart"]["count"], 2, "{me}");
    let mut raw = app.redis.conn().await;
    let n: u64 = raw.zcard("recent:").await.unwrap();
    assert_eq!(n, 1, "the cart's session is where the cleaner finds it");
    let guests: u64 = raw.zcard("guests:").await.unwrap();
    assert_eq!(guests, 0, "a cart is no guest");
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
    // The item pages' touches are held back until the process's next flush.
    app.flush_views().await;
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

/// Going back to an item page the browser holds (`304` to its ETag, whether
/// the page is kept or not) is a view too, in the ranking and the history.
#[tokio::test]
async fn an_item_page_answered_304_is_a_view() {
    let app = TestApp::start().await;
    let cookie = app.visitor().await;
    for visit in 1..=3 {
        let first = app.get("/items/3", Some(&cookie)).await;
        assert_eq!(first.status(), StatusCode::OK);
        // Not viewed yet, the page is not kept; viewed, it is.
        let kept = first.headers()["x-cache"] != "BYPASS";
        assert_eq!(kept, visit > 1, "visit {visit}");
        let etag = first.headers()[header::ETAG].clone();
        let again = Request::get("/items/3")
            .header(header::COOKIE, cookie.as_str())
            .header(header::IF_NONE_MATCH, etag)
            .body(Body::empty())
            .unwrap();
        assert_eq!(
            app.send(again).await.status(),
            StatusCode::NOT_MODIFIED,
            "visit {visit}"
        );
        app.flush_views().await;
        let score: Option<f64> = app.redis.conn().await.zscore("viewed:", 3).await.unwrap();
        assert_eq!(score, Some(-2.0 * f64::from(visit)), "visit {visit}");
    }
    let me = app.me(&cookie).await;
    assert_eq!(me["recently_viewed"][0]["id"], 3);
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

/// Served over TLS (`--secure-cookies`), a page of the shop's host over plain
/// HTTP is another origin: its posts are refused; the `https://` origin's are
/// not.
#[tokio::test]
async fn over_tls_a_plain_http_origin_is_another_site() {
    let config = WebConfig {
        secure_cookies: true,
        ..WebConfig::default()
    };
    let app = TestApp::with_config(config).await;
    let post = |origin: &str| {
        Request::post("/cart")
            .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
            .header(header::HOST, "shop.example")
            .header(header::ORIGIN, origin)
            .body(Body::from("item=3&count=1"))
            .unwrap()
    };
    for (origin, status) in [
        ("http://shop.example", StatusCode::FORBIDDEN),
        ("https://evil.example", StatusCode::FORBIDDEN),
        ("https://shop.example", StatusCode::SEE_OTHER),
    ] {
        assert_eq!(app.send(post(origin)).await.status(), status, "{origin}");
    }
}

/// The floods issue's drill: a shopper logged in with a cart, then a flood of
/// cookieless cart posts (each starting a session holding a cart) past the session
/// cap. The cleaner takes the flood's carts, never the shopper.
#[tokio::test]
async fn a_flood_of_cookieless_carts_at_the_cap_never_removes_a_logged_in_shopper() {
    let config = WebConfig {
        cart_starts_per_minute: 1_000,
        ..WebConfig::default()
    };
    let app = TestApp::with_config(config).await;
    let alice = app.logged_in("ada").await;
    let added = app
        .post("/cart", Some(&alice), "item=2&count=1", true)
        .await;
    assert_eq!(added.status(), StatusCode::OK);
    for _ in 0..200 {
        let resp = app.post("/cart", None, "item=3&count=1", true).await;
        assert_eq!(resp.status(), StatusCode::OK);
    }
    let cleaner = shop_cache::session_cleaner::SessionCleaner::new(
        app.state.redis.clone(),
        app.keys.clone(),
        50,
        100,
    )
    .unwrap();
    while cleaner.step().await.unwrap() != shop_cache::session_cleaner::CleanerStep::Idle {}
    let sessions: u64 = app
        .redis
        .conn()
        .await
        .zcard(app.keys.recent_in(app.keys.shards().next().unwrap()))
        .await
        .unwrap();
    assert_eq!(sessions, 50, "the cap holds");
    let me = app.me(&alice).await;
    assert_eq!(me["user"]["name"], "ada", "{me}");
    assert_eq!(me["cart"]["count"], 1, "{me}");
}

/// `/api/me` reads its session with plain reads and holds its touch back: the
/// session's last-seen time is written by the next flush. A session near the end
/// of its idle time is touched at once instead (by the touch script, which
/// decides its lifetime by Redis's clock).
#[tokio::test]
async fn the_per_user_calls_touch_is_written_by_the_flush_and_at_once_near_a_lifetimes_end() {
    let app = TestApp::start().await;
    let guest_idle = app.config.session_lifetimes.guest_idle().as_secs_f64();
    let now = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs_f64()
    };
    let visitor = app.visitor().await;
    let token: SessionToken = visitor.split_once('=').unwrap().1.parse().unwrap();
    let seen = |app: &TestApp| {
        let (mut conn, key, member) = (
            app.conn.clone(),
            app.keys.recent_of(&token).to_owned(),
            token.expose().to_owned(),
        );
        async move {
            let score: Option<f64> = conn.zscore(key, member).await.unwrap();
            score.expect("a live session")
        }
    };
    let set_seen = |app: &TestApp, at: f64| {
        let (mut conn, key, member) = (
            app.conn.clone(),
            app.keys.recent_of(&token).to_owned(),
            token.expose().to_owned(),
        );
        async move {
            let _: () = conn.zadd(key, member, at).await.unwrap();
        }
    };
    assert_eq!(app.me(&visitor).await["user"], serde_json::Value::Null);
    app.flush_views().await;

    // Seen an hour ago: the call answers, and the flush writes its touch.
    set_seen(&app, now() - 3600.0).await;
    let resp = app.get("/api/me", Some(&visitor)).await;
    assert_eq!(resp.status(), StatusCode::OK);
    assert!(cookie_of(&resp).is_none(), "the same session");
    app.flush_views().await;
    assert!(
        now() - seen(&app).await < 60.0,
        "the held touch was written"
    );

    // Seen a minute before its idle time is up: touched at once, no flush.
    set_seen(&app, now() - guest_idle + 60.0).await;
    let resp = app.get("/api/me", Some(&visitor)).await;
    assert_eq!(resp.status(), StatusCode::OK);
    assert!(cookie_of(&resp).is_none(), "still the same session");
    assert!(
        now() - seen(&app).await < 60.0,
        "a session near its end is touched at once"
    );

    // Past it: refused, a new cookie, as before.
    set_seen(&app, now() - guest_idle - 60.0).await;
    let resp = app.get("/api/me", Some(&visitor)).await;
    let fresh = cookie_of(&resp).expect("a new cookie");
    assert_ne!(fresh, visitor);
}
