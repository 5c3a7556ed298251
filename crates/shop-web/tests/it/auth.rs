//! Logging in and out through the router: token rotation with the cart carried,
//! the `next` parameter, double submits, and the login limits.

use axum::http::{StatusCode, header};
use shop_testapp::{TestApp, cookie_of, json, text};
use shop_web::WebConfig;

use crate::routes::guest_with_two_of_item_7;

#[tokio::test]
async fn login_rotates_the_token_and_keeps_the_cart() {
    let app = TestApp::start().await;
    let guest = guest_with_two_of_item_7(&app, "walt").await;

    let wrong = app
        .post("/login", Some(&guest), "name=walt&password=nope", false)
        .await;
    assert_eq!(wrong.status(), StatusCode::UNAUTHORIZED);
    let page = text(wrong).await;
    assert!(page.contains("Wrong name or password"), "{page}");
    assert!(page.contains(r#"value="walt""#), "the name kept: {page}");
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
    // The old token is dead: it is not logged in, and holds no cart (sent again,
    // it is only a new guest session).
    let old = json(app.get("/api/me", Some(&guest)).await).await;
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

/// A name typed with capitals (a phone's keyboard makes "Walt") logs in as
/// the lowercase account it can only be; a refused login keeps the name.
#[tokio::test]
async fn a_login_name_is_lowercased() {
    let app = TestApp::start().await;
    app.db
        .create_user("walt", "right-pw")
        .await
        .unwrap()
        .unwrap();
    let resp = app
        .post("/login", None, "name=%20Walt%20&password=right-pw", true)
        .await;
    assert_eq!(resp.status(), StatusCode::OK);
    let user = cookie_of(&resp).unwrap();
    assert_eq!(app.me(&user).await["user"]["name"], "walt");
    let wrong = app
        .post("/login", None, "name=WALT&password=nope", false)
        .await;
    assert_eq!(wrong.status(), StatusCode::UNAUTHORIZED);
    assert!(text(wrong).await.contains(r#"value="walt""#));
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
            slow_down: None,
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

/// The device cookie of `resp`, as a `Cookie` header's part.
fn device_of(resp: &axum::response::Response) -> Option<String> {
    resp.headers()
        .get_all(header::SET_COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .find(|v| v.starts_with("shop_device="))
        .map(|v| v.split(';').next().unwrap().to_owned())
}

/// Before: 11 wrong tries a minute from anywhere kept an account's owner out with
/// the right password (429 for a minute, renewed by every try). Now only failures
/// count, the owner's browser (its device cookie) goes through, and a new browser
/// is slowed down, not shut out.
#[tokio::test]
async fn a_locked_name_lets_its_owners_browser_in_and_slows_the_rest_down() {
    let app = TestApp::with_config(WebConfig {
        login_limits: shop_cache::login_limit::LoginLimits {
            per_address: 1_000,
            per_name: 10,
            window: std::time::Duration::from_secs(60),
            slow_down: Some(std::time::Duration::from_millis(300)),
        },
        ..WebConfig::default()
    })
    .await;
    app.db
        .create_user("bobby", "right-pw")
        .await
        .unwrap()
        .unwrap();
    // Bob's own logins never count: 15 in a row.
    let mut device = None;
    for n in 0..15 {
        let resp = app
            .post("/login", None, "name=bobby&password=right-pw", true)
            .await;
        assert_eq!(resp.status(), StatusCode::OK, "login {n}");
        device = device_of(&resp);
        let set = resp
            .headers()
            .get_all(header::SET_COOKIE)
            .iter()
            .map(|v| v.to_str().unwrap().to_owned())
            .find(|v| v.starts_with("shop_device="))
            .expect("a device cookie");
        assert!(
            set.contains("HttpOnly") && set.contains("Max-Age="),
            "{set}"
        );
    }
    let device = device.unwrap();
    // An attacker's wrong tries: 10, then the name slows down.
    for n in 0..10 {
        let resp = app
            .post("/login", None, "name=bobby&password=guess", true)
            .await;
        assert_eq!(resp.status(), StatusCode::UNAUTHORIZED, "try {n}");
    }
    let resp = app
        .post("/login", None, "name=bobby&password=guess", true)
        .await;
    assert_eq!(resp.status(), StatusCode::TOO_MANY_REQUESTS);
    let wait: u64 = resp.headers()[header::RETRY_AFTER]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(
        wait, 1,
        "the slow-down's interval, rounded up, not the window"
    );
    // Bob's browser, with its device cookie: straight in.
    let bobs = format!("{}; {device}", app.visitor().await);
    let resp = app
        .post("/login", Some(&bobs), "name=bobby&password=right-pw", true)
        .await;
    assert_eq!(resp.status(), StatusCode::OK);
    // A new browser with the right password: in within a few intervals.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let resp = app
            .post("/login", None, "name=bobby&password=right-pw", true)
            .await;
        if resp.status() == StatusCode::OK {
            break;
        }
        assert_eq!(resp.status(), StatusCode::TOO_MANY_REQUESTS);
        assert!(std::time::Instant::now() < deadline, "never let in");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

/// IPv6: a subscriber rotating through the /64s of its /56 (or a site through the
/// /56s of its /48) gets a few times one address's allowance, not 256 (or 65,536)
/// times.
#[tokio::test]
async fn ipv6_login_attempts_count_per_64_56_and_48() {
    let app = TestApp::with_config(WebConfig {
        login_limits: shop_cache::login_limit::LoginLimits {
            per_address: 2,
            per_name: 1_000,
            window: std::time::Duration::from_secs(60),
            slow_down: None,
        },
        trust_forwarded_for: true,
        ..WebConfig::default()
    })
    .await;
    let attempt = |from: String| {
        let req = shop_testapp::form_post("/login", None, true)
            .header("x-forwarded-for", from)
            .body(axum::body::Body::from("name=nobody&password=wrong"))
            .unwrap();
        app.send(req)
    };
    // One /64: two attempts, then 429.
    for n in 0..2 {
        assert_eq!(
            attempt(format!("2001:db8:1:100::{n}")).await.status(),
            StatusCode::UNAUTHORIZED
        );
    }
    assert_eq!(
        attempt("2001:db8:1:100::9".into()).await.status(),
        StatusCode::TOO_MANY_REQUESTS
    );
    // Other /64s of the same /56 (its limit: 4x, 8; the refused attempt counted
    // only in its own /64, so one /64 hammering cannot use up the rest's share):
    // 6 more, then even a fresh /64 of that /56 is refused.
    for n in 1..3 {
        for i in 0..2 {
            let from = format!("2001:db8:1:1{n:02x}::{i}");
            assert_eq!(
                attempt(from).await.status(),
                StatusCode::UNAUTHORIZED,
                "/64 {n}"
            );
        }
    }
    for from in ["2001:db8:1:1fd::1", "2001:db8:1:1fe::1"] {
        assert_eq!(
            attempt(from.into()).await.status(),
            StatusCode::UNAUTHORIZED,
            "{from}"
        );
    }
    assert_eq!(
        attempt("2001:db8:1:1ff::1".into()).await.status(),
        StatusCode::TOO_MANY_REQUESTS
    );
    // Another /56 of the same /48 is its own: allowed.
    assert_eq!(
        attempt("2001:db8:1:200::1".into()).await.status(),
        StatusCode::UNAUTHORIZED
    );
}

/// Logouts of sessions nobody is logged in to (made-up tokens, in a loop) end
/// only so many a minute from one address: each lists its token in `ended:`,
/// whose bound a flood filled in under a second. A logged-in user's logout from
/// the same address still ends the session; another address has its own share.
#[tokio::test]
async fn logouts_of_made_up_tokens_are_bounded_per_address() {
    let app = TestApp::with_config(WebConfig {
        trust_forwarded_for: true,
        ..WebConfig::default()
    })
    .await;
    let logout = |cookie: String, from: &'static str| {
        let req = shop_testapp::form_post("/logout", Some(&cookie), true)
            .header("x-forwarded-for", from)
            .body(axum::body::Body::empty())
            .unwrap();
        app.send(req)
    };
    let made_up = || {
        format!(
            "shop_session={}",
            shop_cache::session::SessionToken::generate().expose()
        )
    };
    let flooder = "198.51.100.66";
    let per_minute = shop_web::auth::GUEST_LOGOUTS_PER_MINUTE as usize;
    for _ in 0..per_minute {
        assert_eq!(logout(made_up(), flooder).await.status(), StatusCode::OK);
    }
    let refused = logout(made_up(), flooder).await;
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
    assert!(refused.headers().contains_key(header::RETRY_AFTER));
    let mut conn = app.redis.conn().await;
    let mut ended = 0;
    for shard in app.keys.shards() {
        let n: usize = redis::AsyncCommands::zcard(&mut conn, app.keys.ended_in(shard))
            .await
            .unwrap();
        ended += n;
    }
    assert_eq!(ended, per_minute, "only the logouts answered are listed");

    let user = app.logged_in("lorna").await;
    let resp = logout(user.clone(), flooder).await;
    assert_eq!(resp.status(), StatusCode::OK, "a logged-in user's logout");
    assert_eq!(
        app.get("/account", Some(&user)).await.status(),
        StatusCode::SEE_OTHER,
        "that session ended"
    );
    let other = logout(made_up(), "198.51.100.67").await;
    assert_eq!(other.status(), StatusCode::OK, "another address");
}
