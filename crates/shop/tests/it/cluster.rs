//! `shop serve --redis-cluster` on a private 6-node Redis Cluster: the whole shop
//! (pages, page cache, cart, login, checkout, flash sale, insights) with the
//! cluster key layout, and no key outside a hash tag where the layout puts one.

use std::time::{Duration, Instant};

use shop_db::Db;
use shop_testkit::{TestDb, TestRedisCluster};

use crate::e2e::{
    Reply, add_log_in_and_check_out, checkout_form, eventually, log_in, request, request_with,
    seed, serve, stop,
};
use crate::shop;

fn json(reply: &Reply) -> serde_json::Value {
    serde_json::from_str(&reply.body).unwrap_or_else(|_| panic!("not JSON: {}", reply.body))
}

/// A shop on its own cluster: the cluster, a SQLite database seeded with `items`
/// items, and a working directory; `command()` is `shop` pointed at them.
pub(crate) struct ClusterShop {
    pub(crate) cluster: TestRedisCluster,
    pub(crate) db: TestDb,
    cwd: tempfile::TempDir,
}

impl ClusterShop {
    pub(crate) fn seeded(items: &str) -> Self {
        Self::seeded_on(TestDb::sqlite(), items)
    }

    /// The same on `db` (SQLite or PostgreSQL).
    fn seeded_on(db: TestDb, items: &str) -> Self {
        let shop = Self {
            cluster: TestRedisCluster::start(),
            db,
            cwd: tempfile::tempdir().unwrap(),
        };
        seed(shop.command(), items);
        shop
    }

    /// Puts item 7 on sale: 3 units at 100 cents.
    fn sale_of_7(&self) {
        crate::e2e::succeed(self.command().args([
            "sale",
            "start",
            "7",
            "--stock",
            "3",
            "--price-cents",
            "100",
        ]));
    }

    pub(crate) fn command(&self) -> std::process::Command {
        let mut cmd = shop();
        cmd.current_dir(self.cwd.path())
            .env("SHOP_REDIS_CLUSTER", self.cluster.seeds_arg())
            .env("DATABASE_URL", self.db.url());
        cmd
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_whole_shop_runs_on_a_cluster() {
    let shop = ClusterShop::seeded("30");
    shop.sale_of_7();
    let (child, addr) = serve(shop.command(), &["--rank-limit", "100"]);

    // Pages, and the page cache: once item 5's views reach viewed: (batched and
    // flushed by the server), its page is served from the cache.
    let item = request(&addr, "GET", "/items/5", None, None);
    assert_eq!(item.status, 200, "{}", item.body);
    // The page carries no cookie: the page's `/api/me` call does.
    let guest = request(&addr, "GET", "/api/me", None, None)
        .session_cookie()
        .expect("a visitor gets a cookie");
    let cached = eventually(
        "item 5 cached",
        || request(&addr, "GET", "/items/5", Some(&guest), None),
        |r| r.status == 200 && r.header("x-cache").as_deref() == Some("HIT"),
    );
    // The same page (its inline insights count views, which went on meanwhile).
    let without_insights = |page: &str| -> String {
        const OPEN: &str = "<script type=\"application/json\" id=\"insights-data\">";
        match page.split_once(OPEN) {
            Some((before, rest)) => {
                before.to_owned() + rest.split_once("</script>").map_or("", |(_, after)| after)
            }
            None => page.to_owned(),
        }
    };
    assert_eq!(
        without_insights(&cached.body),
        without_insights(&item.body),
        "the cached page is the rendered one"
    );

    // Cart, login (the session moves to a new token in the same shard), checkout.
    let user = add_log_in_and_check_out(&addr, &guest);
    let me = json(&request(&addr, "GET", "/api/me", Some(&user), None));
    assert_eq!(me["recently_viewed"][0]["id"], 5, "history moved too: {me}");

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
    assert_eq!(json(&stock)["stock"], 3, "{}", stock.body);
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
    assert_eq!(sold, 1, "one unit per user (the default --flash-limit)");
    // The sale's stock, refreshed into the row cache every second, shows the sale.
    eventually(
        "the sold unit shown",
        || request(&addr, "GET", "/api/inventory/7", None, None),
        |r| r.status == 200 && json(r)["stock"] == 2,
    );

    // A catalogue change: the cached item page, the listing and the cached row
    // show it the moment `shop items update` returns (tags and purge on the
    // cluster layout).
    request(&addr, "GET", "/items", None, None);
    assert_eq!(
        request(&addr, "GET", "/items", None, None)
            .header("x-cache")
            .as_deref(),
        Some("HIT")
    );
    crate::e2e::succeed(shop.command().args([
        "items",
        "update",
        "5",
        "--price-cents",
        "777",
        "--title",
        "Cluster kettle",
    ]));
    crate::e2e::succeed(
        shop.command()
            .args(["items", "update", "7", "--title", "Sale lamp"]),
    );
    // Redis's copies are purged when the command returns; the server's own tier
    // drops its copies as the purge's event arrives, within milliseconds.
    eventually(
        "the changed item's page",
        || request(&addr, "GET", "/items/5", Some(&guest), None),
        |page| page.body.contains("Cluster kettle") && page.body.contains("$7.77"),
    );
    eventually(
        "the listing showing the changed item",
        || request(&addr, "GET", "/items", None, None),
        |listing| listing.body.contains("Cluster kettle"),
    );
    let row = json(&request(&addr, "GET", "/api/inventory/7", None, None));
    assert_eq!(row["title"], "Sale lamp", "{row}");
    crate::e2e::succeed(shop.command().args(["items", "remove", "5"]));
    eventually(
        "the retired item's page",
        || request(&addr, "GET", "/items/5", None, None),
        |page| page.status == 410,
    );

    assert!(stop(child).success());
    let db = Db::connect(shop.db.url()).await.unwrap();
    let alice = db
        .check_password("alice", "alice-password")
        .await
        .unwrap()
        .unwrap();
    assert!(!db.orders_of(alice, 10).await.unwrap().is_empty());

    // Every session key is in a shard's hash tag; nothing uses the book's names.
    let keys = shop.cluster.all_keys().await;
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
            "ptag:",
            "ptag-purged:",
        ]
        .iter()
        .any(|p| key.starts_with(p))
        {
            assert!(key.contains('{') && key.contains('}'), "untagged {key}");
        }
    }
}

/// What a shopper is charged on the cluster layout: a price changed between the
/// cart page and the click is asked about, not charged; a placed order takes only
/// its lines; a flash buy pays the sale's price; a retired item stops selling.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn money_paths_hold_on_a_cluster() {
    for db in TestDb::all().await {
        money_paths_on(ClusterShop::seeded_on(db, "30")).await;
    }
}

async fn money_paths_on(shop: ClusterShop) {
    shop.sale_of_7();
    let (child, addr) = serve(shop.command(), &[]);
    let alice = log_in(&addr, "alice");
    let json_accept = [("accept", "application/json")];
    request(&addr, "POST", "/cart", Some(&alice), Some("item=5&count=2"));
    let shown = checkout_form(&addr, &alice, "cluster-1");
    crate::e2e::succeed(
        shop.command()
            .args(["items", "update", "5", "--price-cents", "999999"]),
    );
    let refused = request_with(
        &addr,
        "POST",
        "/checkout",
        Some(&alice),
        Some(&shown),
        &json_accept,
    );
    assert_eq!(refused.status, 409, "{}", refused.body);
    let body = json(&refused);
    assert_eq!(body["changes"][0]["now_cents"], 999_999, "{body}");
    assert_eq!(body["cart_version"], "5:2:999999", "{body}");

    // Confirmed; a line added meanwhile in another tab would stay (the take).
    let confirm = format!(
        "key=cluster-2&cart_version={}",
        body["cart_version"].as_str().unwrap()
    );
    request(&addr, "POST", "/cart", Some(&alice), Some("item=6&count=1"));
    let refused = request_with(
        &addr,
        "POST",
        "/checkout",
        Some(&alice),
        Some(&confirm),
        &json_accept,
    );
    assert_eq!(
        json(&refused)["changes"][0]["added"],
        true,
        "{}",
        refused.body
    );
    request(&addr, "POST", "/cart", Some(&alice), Some("item=6&count=0"));
    let placed = request_with(
        &addr,
        "POST",
        "/checkout",
        Some(&alice),
        Some(&confirm),
        &json_accept,
    );
    assert_eq!(placed.status, 200, "{}", placed.body);
    assert_eq!(json(&placed)["total_cents"], 2 * 999_999);
    let me = json(&request(&addr, "GET", "/api/me", Some(&alice), None));
    assert_eq!(me["cart"]["count"], 0, "{me}");

    // The flash sale's price, whatever the regular price does.
    crate::e2e::succeed(
        shop.command()
            .args(["items", "update", "7", "--price-cents", "5000"]),
    );
    let buy = |key: &str| {
        request_with(
            &addr,
            "POST",
            "/api/flash/7/buy",
            Some(&alice),
            None,
            &[("idempotency-key", key), ("accept", "application/json")],
        )
    };
    let bought = buy("c-buy-1");
    assert_eq!(bought.status, 200, "{}", bought.body);
    let order = json(&bought)["order_id"].as_i64().unwrap();
    let db = Db::connect(shop.db.url()).await.unwrap();
    let lines = db.order_lines(order).await.unwrap();
    assert_eq!(lines[0].2, 100, "{lines:?}");

    // Retired, it stops selling (bob has not bought yet).
    crate::e2e::succeed(shop.command().args(["items", "remove", "7"]));
    let bob = log_in(&addr, "bob");
    let after = request_with(
        &addr,
        "POST",
        "/api/flash/7/buy",
        Some(&bob),
        None,
        &[
            ("idempotency-key", "c-buy-2"),
            ("accept", "application/json"),
        ],
    );
    assert_eq!(json(&after)["outcome"], "not_on_sale", "{}", after.body);
    assert!(stop(child).success());
}

/// The failover drill: under traffic, one primary of the cluster is killed; its
/// replica takes over; no session or cart written (and replicated) before the kill
/// is lost, and the shop answers normally again without a restart. Prints the
/// figures BENCHMARKS.md reports ("Cluster failover").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_primary_fails_over_under_traffic_and_nothing_is_lost() {
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    use std::sync::{Arc, Mutex};

    let mut shop = ClusterShop::seeded("200");
    // The 64 shoppers all come from this machine's one address.
    let (child, addr) = serve(shop.command(), &["--cart-starts-per-address", "1000"]);

    // 64 shoppers, each with a one-line cart: sessions in (nearly) every shard.
    let mut shoppers = Vec::new();
    for n in 1..=64u64 {
        request(&addr, "GET", &format!("/items/{n}"), None, None);
        let cookie = request(&addr, "GET", "/api/me", None, None)
            .session_cookie()
            .unwrap();
        let add = request(
            &addr,
            "POST",
            "/cart",
            Some(&cookie),
            Some(&format!("item={n}&count=1")),
        );
        assert_eq!(add.status, 303, "{}", add.body);
        shoppers.push((n, cookie));
    }
    // Replication is asynchronous: the replicas get these writes first, as the
    // drill is about failover, not about the writes of the last milliseconds.
    shop.cluster
        .wait_until_replicated(Duration::from_secs(10))
        .await;

    // Traffic: item views and carts by the shoppers, errors timed.
    let stop_traffic = Arc::new(AtomicBool::new(false));
    let sent = Arc::new(AtomicU64::new(0));
    let failures: Arc<Mutex<Vec<(Instant, u16)>>> = Arc::default();
    let start = Instant::now();
    let traffic: Vec<_> = (0..4)
        .map(|worker| {
            let (stop, sent, failures) = (stop_traffic.clone(), sent.clone(), failures.clone());
            let (addr, shoppers) = (addr.clone(), shoppers.clone());
            std::thread::spawn(move || {
                let mut i = worker;
                while !stop.load(Ordering::Relaxed) {
                    let (n, cookie) = &shoppers[i % shoppers.len()];
                    let reply = if i % 2 == 0 {
                        request(&addr, "GET", &format!("/items/{n}"), Some(cookie), None)
                    } else {
                        request(&addr, "GET", "/api/me", Some(cookie), None)
                    };
                    sent.fetch_add(1, Ordering::Relaxed);
                    if reply.status >= 500 {
                        failures
                            .lock()
                            .unwrap()
                            .push((Instant::now(), reply.status));
                    }
                    i += 4;
                }
            })
        })
        .collect();
    std::thread::sleep(Duration::from_secs(1));
    let victim = shop.cluster.primaries()[0];
    let killed_at = Instant::now();
    shop.cluster.kill(victim);
    let gap = shop.cluster.wait_until_ok(Duration::from_secs(30)).await;
    // Recovered = 2 s of traffic without an error after the cluster is whole again;
    // traffic goes on until then (at most 20 s after the kill).
    let quiet = Duration::from_secs(2);
    let recovered = loop {
        std::thread::sleep(Duration::from_millis(100));
        let last = failures.lock().unwrap().iter().map(|(at, _)| *at).max();
        let since = last.map_or(killed_at, |at| at.max(killed_at));
        let now = Instant::now();
        if now >= killed_at + gap && now.duration_since(since) >= quiet {
            break Some(since.duration_since(killed_at));
        }
        if now.duration_since(killed_at) > Duration::from_secs(20) {
            break None;
        }
    };
    stop_traffic.store(true, Ordering::Relaxed);
    for t in traffic {
        t.join().unwrap();
    }
    let failures = failures.lock().unwrap().clone();
    println!(
        "failover drill: {} requests in {:.1} s; primary killed at {:.1} s; cluster ok after \
         {:.2} s; {} answers >= 500 (statuses {:?}), the last {:.2} s after the kill",
        sent.load(Ordering::Relaxed),
        start.elapsed().as_secs_f64(),
        killed_at.duration_since(start).as_secs_f64(),
        gap.as_secs_f64(),
        failures.len(),
        failures
            .iter()
            .map(|(_, s)| *s)
            .collect::<std::collections::BTreeSet<_>>(),
        recovered.map_or(f64::NAN, |d| d.as_secs_f64()),
    );
    assert!(
        recovered.is_some(),
        "the shop did not recover within 20 s of the kill: {} errors",
        failures.len()
    );

    // Every shopper still has their session and cart.
    let mut lost = Vec::new();
    let checked = Instant::now();
    for (n, cookie) in &shoppers {
        // A whole answer, not a 503 nor a `"degraded"` guest's answer of a slot
        // whose node the shop still fails fast on (its slot map read anew each
        // second; the traffic above counts only errors, and `/api/me` answers
        // 200 `"degraded"` meanwhile).
        let me = eventually(
            "a whole answer from /api/me",
            || request(&addr, "GET", "/api/me", Some(cookie), None),
            |r| r.status < 500 && !r.body.contains("\"degraded\":true"),
        );
        let known = me.session_cookie().is_none(); // an unknown token gets a new cookie
        let body = json(&me);
        if !known || body["cart"]["lines"] != serde_json::json!([{"item": n, "quantity": 1}]) {
            lost.push((*n, me.status, body["cart"].clone()));
        }
    }
    println!(
        "failover drill: every shopper answered whole {:.2} s after the recovery",
        checked.elapsed().as_secs_f64()
    );
    assert!(lost.is_empty(), "lost after failover: {lost:?}");
    assert!(stop(child).success());
}

/// The whole cluster gone: pages must still be served from the database quickly, as
/// on one node, and not after every command's retries. Prints the figures.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_whole_cluster_down_pages_are_still_served() {
    let mut shop = ClusterShop::seeded("20");
    let (child, addr) = serve(shop.command(), &[]);
    assert_eq!(request(&addr, "GET", "/items/3", None, None).status, 200);
    for node in 0..6 {
        shop.cluster.kill(node);
    }
    let mut slowest = Duration::ZERO;
    for n in 0..50 {
        let started = Instant::now();
        let page = request(&addr, "GET", &format!("/items/{}", n % 20 + 1), None, None);
        slowest = slowest.max(started.elapsed());
        assert_eq!(page.status, 200, "{}", page.body);
    }
    println!("whole cluster killed: slowest of 50 item pages {slowest:?}");
    assert!(slowest < Duration::from_secs(1), "slowest {slowest:?}");
    stop(child);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn account_carts_follow_the_shopper_on_a_cluster() {
    let shop = ClusterShop::seeded("30");
    let (child, addr) = serve(shop.command(), &[]);
    crate::account_cart::account_carts_follow_the_shopper(&addr);
    assert!(stop(child).success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn behind_varnish_on_a_cluster() {
    let shop = ClusterShop::seeded("30");
    let ranking = shop_cache::keys::Keys::cluster("").item_views().to_owned();
    let views = async |item: u64| {
        let score: Option<f64> = redis::cmd("ZSCORE")
            .arg(&ranking)
            .arg(item)
            .query_async(&mut shop.cluster.conn().await)
            .await
            .unwrap();
        -score.unwrap_or(0.0)
    };
    crate::edge::behind_the_edge(|| shop.command(), views).await;
}
