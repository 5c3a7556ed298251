//! `examples/product_pages.rs`, built by `cargo test` with the other examples, run
//! as a process against its own redis-server: the layer on an app's own routes,
//! and a purge that reaches the next request.

use shop_testkit::{RunningExample, TestRedis};

#[test]
fn the_example_app_caches_its_pages_and_a_price_change_purges_them() {
    let redis = TestRedis::start();
    let app = RunningExample::start("product_pages", &redis.url());

    let first = app.get("/products/7", None);
    assert_eq!((first.status, first.header("x-cache")), (200, Some("MISS")));
    assert!(first.body.contains("10.00"), "{}", first.body);
    let second = app.get("/products/7", None);
    assert_eq!(second.header("x-cache"), Some("HIT"));
    assert_eq!(second.body, first.body);
    assert_eq!(app.get("/products/8", None).header("x-cache"), Some("MISS"));

    let changed = app.request("POST", "/products/7/price/1999", None);
    assert_eq!(changed.status, 200);
    assert!(changed.body.contains("purged 1 page"), "{}", changed.body);
    let after = app.get("/products/7", None);
    assert_eq!(after.header("x-cache"), Some("MISS"));
    assert!(after.body.contains("19.99"), "{}", after.body);
    assert_eq!(app.get("/products/7", None).header("x-cache"), Some("HIT"));
    // The other product's page was not purged.
    assert_eq!(app.get("/products/8", None).header("x-cache"), Some("HIT"));
}
