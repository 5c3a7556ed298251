//! `shop serve --redis-cluster` on a private 6-node Redis Cluster: the whole shop
//! (pages, page cache, cart, login, checkout, flash sale, insights) with the
//! cluster key layout, and no key outside a hash tag where the layout puts one.

use std::time::{Duration, Instant};

use shop_db::Db;
use shop_testkit::{TestDb, TestRedisCluster};

use crate::e2e::{Reply, request, request_with, seed, serve, stop};
use crate::shop;

/// Polls `get` until `done` holds (the row refresher and the view flusher are
/// daemons: their effect arrives within a second).
fn eventually(what: &str, mut get: impl FnMut() -> Reply, done: impl Fn(&Reply) -> bool) -> Reply {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let reply = get();
        if done(&reply) {
            return reply;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: last answer {} {}",
            reply.status,
            reply.body
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn json(reply: &Reply) -> serde_json::Value {
    serde_json::from_str(&reply.body).unwrap_or_else(|_| panic!("not JSON: {}", reply.body))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_whole_shop_runs_on_a_cluster() {
    let cluster = TestRedisCluster::start();
    let db = TestDb::sqlite();
    let cwd = tempfile::tempdir().unwrap();
    let command = || {
        let mut cmd = shop();
        cmd.current_dir(cwd.path())
            .env("SHOP_REDIS_CLUSTER", cluster.seeds_arg())
            .env("DATABASE_URL", db.url());
        cmd
    };
    seed(command(), "30");
    let sale = command()
        .args(["sale", "start", "7", "--stock", "3", "--price-cents", "100"])
        .output()
        .unwrap();
    assert!(
        sale.status.success(),
        "{}",
        String::from_utf8_lossy(&sale.stderr)
    );
    let (child, addr) = serve(command(), &["--rank-limit", "100"]);

    // Pages, and the page cache: once item 5's views reach viewed: (batched and
    // flushed by the server), its page is served from the cache.
    let item = request(&addr, "GET", "/items/5", None, None);
    assert_eq!(item.status, 200, "{}", item.body);
    let guest = item.session_cookie().expect("a visitor gets a cookie");
    let cached = eventually(
        "item 5 cached",
        || request(&addr, "GET", "/items/5", Some(&guest), None),
        |r| r.status == 200 && r.header("x-cache").as_deref() == Some("HIT"),
    );
    assert_eq!(
        cached.body, item.body,
        "the cached page is the rendered one"
    );

    // Cart, login (the session moves to a new token in the same shard), checkout.
    let add = request(&addr, "POST", "/cart", Some(&guest), Some("item=5&count=2"));
    assert_eq!(add.status, 303, "{}", add.body);
    let login = request(
        &addr,
        "POST",
        "/login",
        Some(&guest),
        Some("name=alice&password=alice-password&next=/cart"),
    );
    assert_eq!(login.status, 303, "{}", login.body);
    let user = login.session_cookie().expect("login issues a new token");
    assert_ne!(user, guest);
    let me = json(&request(&addr, "GET", "/api/me", Some(&user), None));
    assert_eq!(me["user"]["name"], "alice");
    assert_eq!(
        me["cart"]["lines"],
        serde_json::json!([{"item": 5, "quantity": 2}])
    );
    assert_eq!(me["recently_viewed"][0]["id"], 5, "history moved too: {me}");
    let cart = request(&addr, "GET", "/cart", Some(&user), None);
    let key = cart
        .body
        .split("name=\"key\" value=\"")
        .nth(1)
        .and_then(|r| r.split('"').next())
        .expect("a checkout form")
        .to_owned();
    let checkout = request(
        &addr,
        "POST",
        "/checkout",
        Some(&user),
        Some(&format!("key={key}")),
    );
    assert_eq!(
        checkout.header("location").as_deref(),
        Some("/account"),
        "{}",
        checkout.body
    );

    // Insights: alice viewed and bought item 5.
    let insights = eventually(
        "insights of item 5",
        || request(&addr, "GET", "/api/items/5/insights", None, None),
        |r| r.status == 200 && json(r)["buyers"].as_u64() == Some(1),
    );
    assert!(
        json(&insights)["viewers"].as_u64().unwrap() >= 1,
        "{}",
        insights.body
    );

    // The flash sale: stock from the row cache, three buys, then sold out.
    let stock = eventually(
        "the sale's row cached",
        || request(&addr, "GET", "/api/inventory/7", None, None),
        |r| r.status == 200,
    );
    assert!(stock.body.contains('3'), "{}", stock.body);
    let mut sold = 0;
    for n in 0..4 {
        let buy = request_with(
            &addr,
            "POST",
            "/api/flash/7/buy",
            Some(&user),
            None,
            &[
                ("idempotency-key", &format!("buy-{n}")),
                ("accept", "application/json"),
            ],
        );
        if buy.status == 200 || buy.status == 201 {
            sold += 1;
        } else {
            assert!(
                buy.status == 409 || buy.status == 429,
                "{} {}",
                buy.status,
                buy.body
            );
        }
    }
    assert!(sold >= 1 && sold <= 3, "sold {sold}");

    assert!(stop(child).success());
    let db = Db::connect(db.url()).await.unwrap();
    let alice = db
        .check_password("alice", "alice-password")
        .await
        .unwrap()
        .unwrap();
    assert!(!db.orders_of(alice, 10).await.unwrap().is_empty());

    // Every session key is in a shard's hash tag; nothing uses the book's names.
    let keys = cluster.all_keys().await;
    assert!(keys.iter().any(|k| k.starts_with("recent:{s")), "{keys:?}");
    for book in ["recent:", "login:", "viewed:", "schedule:", "delay:"] {
        assert!(!keys.iter().any(|k| k == book), "{book} in {keys:?}");
    }
    for key in &keys {
        if [
            "recent:",
            "login:",
            "cart:",
            "viewed:",
            "inv:",
            "schedule:",
            "delay:",
        ]
        .iter()
        .any(|p| key.starts_with(p))
        {
            assert!(key.contains('{') && key.contains('}'), "untagged {key}");
        }
    }
}
