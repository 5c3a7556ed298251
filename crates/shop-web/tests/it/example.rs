//! `examples/mini_shop.rs`, built by `cargo test` with the other examples, run as
//! a process against its own redis-server: the session and page-cache layers
//! mounted on routes that are not the shop's.

use std::time::{Duration, Instant};

use shop_testkit::{RunningExample, TestRedis};

#[test]
fn the_example_app_mounts_sessions_and_the_page_cache_on_its_own_routes() {
    let redis = TestRedis::start();
    let app = RunningExample::start("mini_shop", &redis.url());

    // A first visit: the product has no views yet, so its page is not cached, but
    // it is the same for everyone and says so, without a cookie; the visitor's
    // session cookie comes from the per-user call.
    let first = app.get("/products/7", None);
    assert_eq!(first.status, 200);
    assert!(first.body.contains("Product 7"));
    assert_eq!(first.header("x-cache"), Some("BYPASS"));
    assert_eq!(first.header("set-cookie"), None);
    assert!(
        first
            .header("cache-control")
            .is_some_and(|c| c.starts_with("public, max-age=0, s-maxage=")),
        "{:?}",
        first.header("cache-control")
    );
    let cookie = app
        .get("/me", None)
        .header("set-cookie")
        .and_then(|c| c.split(';').next())
        .expect("a session cookie")
        .to_owned();
    assert!(cookie.starts_with("shop_session="), "{cookie}");
    // Once the example's view flusher has written the view (every 100 ms), it
    // ranks: rendered once and stored, then served from Redis.
    let deadline = Instant::now() + Duration::from_secs(5);
    let rendered = loop {
        let reply = app.get("/products/7", Some(&cookie));
        if reply.header("x-cache") != Some("BYPASS") {
            break reply;
        }
        assert!(
            Instant::now() < deadline,
            "the view never reached the ranking"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(rendered.header("x-cache"), Some("MISS"));
    assert_eq!(rendered.header("set-cookie"), None, "the cookie is kept");
    let hit = app.get("/products/7", Some(&cookie));
    assert_eq!((hit.status, hit.header("x-cache")), (200, Some("HIT")));
    assert!(hit.body.contains("Product 7"));
    // Other routes see the session and are not cached.
    let me = app.get("/me", Some(&cookie));
    assert_eq!((me.status, me.body.as_str()), (200, "a guest"));
    assert_eq!(me.header("x-cache"), None);
}
