//! A Redis node that stalls under load (`SIGSTOP` for 3 s, as a fork for a
//! snapshot, a slow command or a noisy neighbour does), on one node and on a
//! cluster (there a primary, whose replica takes over past the test cluster's 1 s
//! node time-out): requests keep answering within about the request budget
//! (`--redis-budget-ms`, 100 ms) instead of the connection's 2 s time-out, item
//! pages stay 200, and what a shopper was told was saved is there afterwards:
//! every cart line saved, every checkout placed once (retried with its key), every
//! flash buy bought once or given back; `/api/me` answers as for a guest.

use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::cluster::ClusterShop;
use crate::drills::{Drill, Sample, pct, select, summary};
use crate::e2e::{
    Binary, checkout_form, log_in, request, request_with, seeded, serve_with_metrics, stop, succeed,
};

/// One cart write a probe made: the line, the count it set, and the answer.
#[derive(Debug, Clone, Copy)]
struct Write {
    item: u64,
    count: u64,
    status: u16,
}

/// The cart `/api/me` shows `cookie`, once the shop reads it again.
fn cart_after(addr: &str, cookie: &str) -> Vec<(u64, u64)> {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let me = request(addr, "GET", "/api/me", Some(cookie), None);
        if me.status == 200 {
            let me: serde_json::Value = serde_json::from_str(&me.body).unwrap();
            return me["cart"]["lines"]
                .as_array()
                .unwrap()
                .iter()
                .map(|l| (l["item"].as_u64().unwrap(), l["quantity"].as_u64().unwrap()))
                .collect();
        }
        assert!(
            Instant::now() < deadline,
            "the cart never came back: {}",
            me.status
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// What a refused checkout's page says, in short.
fn refusal(body: &str) -> String {
    if body.contains("another checkout of this cart is in progress") {
        "in progress (a hold on the cart)".to_owned()
    } else if body.contains("changed since you saw it") {
        let changes = body.split("<li>").skip(1).take(3);
        let changes: Vec<&str> = changes.map(|c| c.split('<').next().unwrap_or("")).collect();
        format!("changed: {changes:?}")
    } else {
        body.chars().take(200).collect()
    }
}

/// Waits (2.7 s at most: the stall lasts 3 s) until the operators' `/healthz`
/// at `internal` names `node` among the Redis nodes failing fast and says so:
/// 503 `"down"` for the one node of a shop, 200 `"degraded"` for one node of
/// a cluster (the others' requests are served). The check's own result is
/// reused for a second, so the first answer that names the node may still
/// say what the check found before.
fn health_names(internal: &str, node: &str) -> bool {
    let expected = match node {
        "redis" => (503, Some("down")),
        _ => (200, Some("degraded")),
    };
    let start = Instant::now();
    let deadline = start + Duration::from_millis(2_700);
    loop {
        let health = request(internal, "GET", "/healthz", None, None);
        if let Ok(json) = serde_json::from_str::<serde_json::Value>(&health.body)
            && json["redis_failing_nodes"]
                .as_array()
                .is_some_and(|nodes| nodes.iter().any(|n| n == node))
            && (health.status, json["status"].as_str()) == expected
        {
            println!(
                "DRILL /healthz said {expected:?} {:?} into the stall",
                start.elapsed()
            );
            return true;
        }
        if Instant::now() > deadline {
            eprintln!(
                "/healthz at the deadline: {} {}; expected {expected:?} naming {node}",
                health.status, health.body
            );
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The drill against the shop at `addr` (`shop` its command, `internal` its
/// operators' listener): `stall` stops a node 3 s in, `wake` lets it go 3 s
/// later; the health check names `node` meanwhile.
async fn stalled_node(
    shop: Command,
    (addr, internal, db_url): (&str, &str, &str),
    node: &str,
    stall: impl FnOnce(),
    wake: impl FnOnce(),
) {
    let cookie = request(addr, "GET", "/api/me", None, None)
        .session_cookie()
        .expect("a cookie");
    for i in 1..=20 {
        assert_eq!(
            request(addr, "GET", &format!("/items/{i}"), Some(&cookie), None).status,
            200
        );
    }
    let (stall_at, wake_at, end_at) = (
        Duration::from_secs(3),
        Duration::from_secs(6),
        Duration::from_secs(9),
    );
    let mut drill = Drill::start_with(shop, addr, end_at);
    for p in 0..2u64 {
        let cookie = cookie.clone();
        drill.probe("page", Duration::from_millis(5), move |a, n| {
            let path = format!("/items/{}", 1 + (n + p * 7) % 20);
            request(a, "GET", &path, Some(&cookie), None)
        });
    }
    let me_cookie = cookie.clone();
    drill.probe("me", Duration::from_millis(5), move |a, _| {
        request(a, "GET", "/api/me", Some(&me_cookie), None)
    });
    let writes: Arc<Mutex<Vec<Write>>> = Arc::default();
    let (cart_cookie, log) = (cookie.clone(), writes.clone());
    drill.probe("cart", Duration::from_millis(10), move |a, n| {
        // Not item 1: the drill's flash sale's, which no cart takes while it runs.
        let (item, count) = (2 + n % 4, 1 + n % 9);
        let form = format!("item={item}&count={count}");
        let reply = request(a, "POST", "/cart", Some(&cart_cookie), Some(&form));
        log.lock().unwrap().push(Write {
            item,
            count,
            status: reply.status,
        });
        reply
    });

    // alice checks out one unit of item 11 over and over: a checkout answered
    // 503 is sent again with the same key (the cart page's form does) until it
    // is answered otherwise, putting the unit back into the cart first.
    let buyer = log_in(addr, "alice");
    let placed: Arc<Mutex<Vec<String>>> = Arc::default();
    let orders = placed.clone();
    let refusals: Arc<Mutex<Vec<String>>> = Arc::default();
    let refused = refusals.clone();
    drill.probe("checkout", Duration::from_millis(20), move |a, n| {
        let key = format!("stall-{n}");
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let add = request(a, "POST", "/cart", Some(&buyer), Some("item=11&count=1"));
            if add.status == 303 {
                let form = checkout_form(a, &buyer, &key);
                let reply = request(a, "POST", "/checkout", Some(&buyer), Some(&form));
                if reply.status != 503 {
                    if reply.status == 303
                        && reply
                            .header("location")
                            .is_some_and(|to| to.starts_with("/account?placed="))
                    {
                        orders.lock().unwrap().push(key);
                    } else {
                        refused.lock().unwrap().push(refusal(&reply.body));
                    }
                    return reply;
                }
            }
            assert!(Instant::now() < deadline, "checkout {key} never answered");
            std::thread::sleep(Duration::from_millis(20));
        }
    });

    // bob buys one unit of the flash sale's item 1 with a new key each time; a
    // buy answered 503 (Redis could not decide, or the order's reservation is
    // pending) is sent again with its key until it has a final answer.
    let flash_buyer = log_in(addr, "bob");
    let finals: Arc<Mutex<Vec<(String, u16, serde_json::Value)>>> = Arc::default();
    let buys = finals.clone();
    drill.probe("flash", Duration::from_millis(20), move |a, n| {
        let key = format!("flash-{n}");
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let headers = [
                ("Idempotency-Key", key.as_str()),
                ("Accept", "application/json"),
            ];
            let reply = request_with(
                a,
                "POST",
                "/api/flash/1/buy",
                Some(&flash_buyer),
                None,
                &headers,
            );
            if reply.status != 503 {
                let body = serde_json::from_str(&reply.body).unwrap_or_default();
                buys.lock().unwrap().push((key, reply.status, body));
                return reply;
            }
            assert!(Instant::now() < deadline, "buy {key} never answered");
            std::thread::sleep(Duration::from_millis(20));
        }
    });

    drill.sleep_until(stall_at);
    stall();
    let named = health_names(internal, node);
    drill.sleep_until(wake_at);
    wake();
    let (all, _report) = drill.finish();
    assert!(
        named,
        "/healthz never named {node} as failing (and said so) while it stalled"
    );

    // What started inside the stall, less a margin at each end.
    let during = (
        stall_at + Duration::from_millis(300),
        wake_at - Duration::from_millis(300),
    );
    println!("DRILL a Redis node stalled {stall_at:?}..{wake_at:?}");
    for kind in ["page", "me", "cart", "checkout", "flash"] {
        println!(
            "  before  {}",
            summary(&all, kind, Duration::ZERO, stall_at)
        );
        println!("  stalled {}", summary(&all, kind, during.0, during.1));
        println!("  after   {}", summary(&all, kind, wake_at, end_at));
    }
    let pages: Vec<&Sample> = select(&all, "page", during.0, during.1);
    assert!(!pages.is_empty());
    assert!(
        all.iter()
            .filter(|s| s.kind == "page")
            .all(|s| s.status == 200),
        "item pages are served throughout"
    );
    // Within the budget, not the 2 s time-out: a request makes a few Redis calls,
    // each bounded by 100 ms, then fails fast on the node's open breaker (a wide
    // margin for a debug build on two shared cores).
    for kind in ["page", "me", "cart"] {
        let stalled = select(&all, kind, during.0, during.1);
        assert!(!stalled.is_empty(), "{kind}: no request during the stall");
        let slowest = pct(&stalled, 1.0);
        assert!(slowest < 1_000.0, "{kind}: {slowest} ms during the stall");
    }
    let statuses_ok = all
        .iter()
        .filter(|s| !["checkout", "flash"].contains(&s.kind))
        .all(|s| matches!(s.status, 200 | 303 | 503));
    assert!(statuses_ok, "only 200, 303 or 503");
    // The per-user call answers as for a guest while its store stalls, never an
    // error.
    let me_failed: Vec<u16> = all
        .iter()
        .filter(|s| s.kind == "me" && s.status != 200)
        .map(|s| s.status)
        .collect();
    assert!(me_failed.is_empty(), "/api/me answered {me_failed:?}");

    // Each checkout placed once, whatever the stall did to its first tries:
    // as many orders as keys answered "placed", one unit each.
    let placed = placed.lock().unwrap().clone();
    assert!(!placed.is_empty());
    let db = shop_db::Db::connect(db_url).await.unwrap();
    let alice = db
        .check_password("alice", "alice-password")
        .await
        .unwrap()
        .unwrap();
    let orders = db.orders_of(alice, 10_000).await.unwrap();
    println!(
        "  {} checkouts placed, {} orders",
        placed.len(),
        orders.len()
    );
    assert_eq!(orders.len(), placed.len(), "one order per checkout placed");
    // And checkouts go on after it: no hold the stall left behind refuses them.
    // (On the cluster, where the stalled primary fails over, a run in four once
    // had every checkout after it answered 409: a hold whose release the replaced
    // primary answered and lost, now given back again as the failover settles,
    // `shop_cache::lock::SETTLE`. Printed only until 12 runs in a row, 4 of them
    // on a loaded machine, placed every checkout after the stall; asserted since.)
    let after = select(&all, "checkout", wake_at, end_at);
    let refusals = refusals.lock().unwrap().clone();
    println!(
        "  {} checkouts refused, the last: {:?}",
        refusals.len(),
        &refusals[refusals.len().saturating_sub(5)..]
    );
    assert!(
        after.iter().any(|s| s.status == 303),
        "no checkout placed after the stall: {:?} ({refusals:?})",
        after.iter().map(|s| s.status).collect::<Vec<_>>()
    );
    assert!(orders.iter().all(|o| o.units == 1), "one unit each");

    // Each flash buy bought once or not at all: an order per "bought", none for
    // a buy whose reservation expired unrecorded, and every unit not ordered is
    // back on sale once the reconciler has settled what the stall left pending.
    let finals = finals.lock().unwrap().clone();
    let mut bought: Vec<i64> = Vec::new();
    for (key, status, body) in &finals {
        match (status, body["outcome"].as_str()) {
            (200, Some("bought")) => bought.push(body["order_id"].as_i64().unwrap()),
            (409, Some("expired")) => {}
            other => panic!("buy {key}: {other:?} {body}"),
        }
    }
    let answered = bought.len();
    bought.sort_unstable();
    bought.dedup();
    assert_eq!(bought.len(), answered, "an order per buy");
    let item = shop_cache::domain::ItemId::new(1).unwrap();
    let ordered = db.units_ordered(item).await.unwrap();
    println!(
        "  {} flash buys, {answered} bought, {ordered} units ordered",
        finals.len()
    );
    assert_eq!(ordered, answered as i64, "one unit per buy answered bought");
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let sale = request(addr, "GET", "/api/flash/1", None, None);
        let stock = serde_json::from_str::<serde_json::Value>(&sale.body)
            .ok()
            .and_then(|s| s["stock"].as_i64());
        if stock == Some(SALE_STOCK - ordered) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "units left in limbo: stock {stock:?}, {ordered} ordered of {SALE_STOCK}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }

    // Nothing a shopper was told was saved is lost: each line holds the count of
    // its last write answered 303, or of a later write that was refused (503) yet
    // reached the node before it stalled and ran when it woke.
    let writes = writes.lock().unwrap().clone();
    let cart = cart_after(addr, &cookie);
    for item in 2..=5u64 {
        let mine: Vec<&Write> = writes.iter().filter(|w| w.item == item).collect();
        let last_saved = mine.iter().rposition(|w| w.status == 303);
        let allowed: Vec<u64> = match last_saved {
            Some(i) => mine[i..]
                .iter()
                .enumerate()
                .filter(|(j, w)| *j == 0 || w.status != 303)
                .map(|(_, w)| w.count)
                .collect(),
            None => mine.iter().map(|w| w.count).collect(),
        };
        let now = cart.iter().find(|(i, _)| *i == item).map(|(_, q)| *q);
        match (now, last_saved) {
            (Some(q), _) => assert!(allowed.contains(&q), "item {item}: {q} not in {allowed:?}"),
            (None, Some(_)) => panic!("item {item}: a saved line is gone"),
            (None, None) => {}
        }
    }
}

/// The shop's own budget (the tests' default is longer), no per-address limit
/// on uncached work (every probe is this machine), and a flash sale one buyer
/// may buy from as often as the drill does, whose pending units are settled a
/// second after they were reserved.
const STALL_FLAGS: [&str; 12] = [
    "--uncached-per-address",
    "10000000",
    "--counted-views-per-address",
    "10000000",
    "--redis-budget-ms",
    "100",
    "--flash-hold",
    "1",
    "--flash-limit",
    "1000000",
    "--flash-buys-per-minute",
    "1000000",
];

/// Units of the drill's flash sale (of item 1): more than it buys.
const SALE_STOCK: i64 = 100_000;

/// Starts the drill's flash sale with `shop`.
fn start_sale(mut shop: Command) {
    let stock = SALE_STOCK.to_string();
    succeed(shop.args([
        "sale",
        "start",
        "1",
        "--stock",
        &stock,
        "--price-cents",
        "100",
    ]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_redis_costs_the_budget_not_seconds() {
    let shop = seeded(200).await;
    start_sale(shop.shop());
    let (child, addr, internal) = serve_with_metrics(shop.shop(), &STALL_FLAGS);
    stalled_node(
        shop.shop(),
        (&addr, &internal, shop.test_db.url()),
        "redis",
        || shop.redis.pause(),
        || shop.redis.resume(),
    )
    .await;
    assert!(stop(child).success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_cluster_node_costs_the_budget_not_seconds() {
    let shop = ClusterShop::seeded("200");
    start_sale(shop.command());
    let (child, addr, internal) = serve_with_metrics(shop.command(), &STALL_FLAGS);
    let primary = shop.cluster.primaries()[0];
    stalled_node(
        shop.command(),
        (&addr, &internal, shop.db.url()),
        &shop.cluster.addrs()[primary],
        || shop.cluster.pause(primary),
        || shop.cluster.resume(primary),
    )
    .await;
    assert!(stop(child).success());
}

/// The nodes the server's log says it fails fast on now: named in a breaker's
/// "failing fast" warning.
fn failing_fast_in(log: &[String]) -> std::collections::BTreeSet<String> {
    log.iter()
        .filter(|line| line.contains("failing fast"))
        .filter_map(|line| line.split("node=").nth(1))
        .filter_map(|rest| rest.split_whitespace().next())
        .map(|node| node.trim_matches('"').to_owned())
        .collect()
}

/// A web server with no traffic, its whole cluster stalled: it learns so by
/// itself (its health watch asks every node about each second), so the first look at
/// `/healthz` after the stall began says 503 `"down"`, where before an idle
/// server went on saying 200 `"degraded"` until it had been asked about three
/// times (about 15 s behind a balancer that looks every 5 s).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_server_learns_of_a_stalled_cluster_without_being_asked() {
    let shop = ClusterShop::seeded("20");
    // No workers: the daemons that would meet the stall on their own are gone.
    // The test kit's budget, a second: the health check's longest. Each look
    // asks every node, so a node whose misses fell behind the others' (a
    // cluster connection rebuilt between the looks) is asked until its
    // breaker opens too (before, once the others failed fast the check's
    // pipeline reached no node, and one primary could stay closed for good).
    let cmd = shop.command();
    let (child, _addr, internal, log) = crate::e2e::serve_logged(cmd, &["--no-workers"]);
    // The operators' /healthz, asked until it says `expected`.
    let health = |expected: (u16, &str)| {
        crate::e2e::eventually_within(
            &format!("/healthz saying {expected:?}"),
            Duration::from_secs(30),
            || request(&internal, "GET", "/healthz", None, None),
            |reply| {
                let status = serde_json::from_str::<serde_json::Value>(&reply.body)
                    .ok()
                    .and_then(|json| json["status"].as_str().map(str::to_owned));
                (reply.status, status.as_deref()) == (expected.0, Some(expected.1))
            },
        )
    };
    health((200, "ok"));
    let primaries: std::collections::BTreeSet<String> = shop
        .cluster
        .primaries()
        .into_iter()
        .map(|node| shop.cluster.addrs()[node].clone())
        .collect();
    let nodes = shop.cluster.addrs().len();
    // Nothing asks the server anything meanwhile: its log says when it knows
    // (from the stall on: a breaker that opened and closed as it started is
    // not this).
    let before = log.lock().unwrap().len();
    for node in 0..nodes {
        shop.cluster.pause(node);
    }
    let stalled = Instant::now();
    let deadline = stalled + Duration::from_secs(25);
    loop {
        let failing = failing_fast_in(&log.lock().unwrap()[before..]);
        if primaries.is_subset(&failing) {
            println!(
                "DRILL every primary failing fast {:?} into the stall",
                stalled.elapsed()
            );
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no look at /healthz, and after {:?} the server fails fast on {failing:?} of {primaries:?}",
            stalled.elapsed()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    // The first look says so.
    let first = request(&internal, "GET", "/healthz", None, None);
    let json: serde_json::Value = serde_json::from_str(&first.body).unwrap();
    assert_eq!(
        (first.status, json["status"].as_str()),
        (503, Some("down")),
        "{}",
        first.body
    );
    for node in 0..nodes {
        shop.cluster.resume(node);
    }
    health((200, "ok"));
    assert!(stop(child).success());
}
