//! A cluster primary that dies (SIGKILL, as a crash) under traffic, with no
//! replica to take over: its slots are gone until an operator acts, and the
//! shop goes on with the other primaries' (the nodes run with
//! `cluster-require-full-coverage no`, as a shop that wants its live slots
//! served while one is lost sets them). `/healthz` says 200 `"degraded"`
//! naming the dead node, not 503 `"down"`, and the sessions on the live
//! primaries are served.
//!
//! Before the fix, redis-rs 1.8's cluster connection got stuck within a moment
//! of the death: every primary's commands missed their budgets, the live ones'
//! too, until a command's 2 s time-out had the connection replaced, and again
//! after it: `/healthz` said 503 `"down"` and every cart write failed. Now the
//! second primary to fail fast has the connection replaced at once.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use shop_testkit::{DeadHost, TestRedisCluster};

use crate::cluster::ClusterShop;

use crate::e2e::{request, serve_with_metrics, stop};

/// How long `/healthz` is watched after the kill: several of the health
/// check's 1 s rounds.
const WATCH: Duration = Duration::from_secs(8);

/// When its answers start to count, after the kill.
const COUNTED_FROM: Duration = Duration::from_secs(1);

/// What `/healthz` said: its status code, its `"status"` and the failing nodes.
type Said = (u16, String, Vec<String>);

/// A direct connection to one node of `cluster`.
async fn node(cluster: &TestRedisCluster, node: usize) -> redis::aio::MultiplexedConnection {
    redis::Client::open(format!("redis://{}", cluster.addrs()[node]))
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_primary_leaves_the_shop_degraded_not_down() {
    a_dead_primary(false).await;
}

/// The same with the primary's host gone, not only its process: a connection
/// to it waits for its time-out instead of being refused. Before the fix each
/// probe of its breaker went through the cluster client, which then rebuilt
/// its slot map and connected to every node before serving any other command:
/// every primary's commands waited the connection time-out, a second, about
/// once a second (`FAULT=dead-host scripts/drill-stall`: `/healthz` 503 in
/// 48-68 of 94-96 looks over the 10 s after the kill).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_host_leaves_the_shop_degraded_not_down() {
    a_dead_primary(true).await;
}

/// A primary and its replica killed under traffic (and, if `host_gone`, their
/// addresses then dropping every connection attempt), `/healthz` watched.
async fn a_dead_primary(host_gone: bool) {
    let mut shop = ClusterShop::seeded("100");
    for n in 0..shop.cluster.addrs().len() {
        let _: () = redis::cmd("CONFIG")
            .arg("SET")
            .arg("cluster-require-full-coverage")
            .arg("no")
            .query_async(&mut node(&shop.cluster, n).await)
            .await
            .unwrap();
    }
    let (child, addr, internal) = serve_with_metrics(
        shop.command(),
        &[
            "--uncached-per-address",
            "10000000",
            "--counted-views-per-address",
            "10000000",
            "--cart-starts-per-address",
            "1000",
            "--redis-budget-ms",
            "100",
        ],
    );
    let shoppers: Vec<String> = (0..24)
        .map(|_| {
            request(&addr, "GET", "/api/me", None, None)
                .session_cookie()
                .unwrap()
        })
        .collect();

    // Traffic: each shopper's page, `/api/me` and a cart line, in turn.
    let stop_traffic = Arc::new(AtomicBool::new(false));
    let (served, degraded) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let traffic: Vec<_> = (0..4)
        .map(|worker| {
            let (stop, served, degraded) = (stop_traffic.clone(), served.clone(), degraded.clone());
            let (addr, shoppers) = (addr.clone(), shoppers.clone());
            std::thread::spawn(move || {
                let mut i = worker;
                while !stop.load(Ordering::Relaxed) {
                    let cookie = Some(shoppers[i % shoppers.len()].as_str());
                    let item = format!("/items/{}", i % 100 + 1);
                    request(&addr, "GET", &item, cookie, None);
                    let me = request(&addr, "GET", "/api/me", cookie, None);
                    match me.body.contains("\"degraded\":true") {
                        false if me.status == 200 => served.fetch_add(1, Ordering::Relaxed),
                        _ => degraded.fetch_add(1, Ordering::Relaxed),
                    };
                    let line = format!("item={}&count=1", i % 20 + 1);
                    request(&addr, "POST", "/cart", cookie, Some(&line));
                    i += 4;
                }
            })
        })
        .collect();
    std::thread::sleep(Duration::from_secs(1));

    let victim = shop.cluster.primaries()[0];
    let victim_addr = shop.cluster.addrs()[victim].clone();
    let replica = shop.cluster.replica_of(victim).await;
    shop.cluster.kill(replica);
    shop.cluster.kill(victim);
    let _gone: Vec<DeadHost> = match host_gone {
        true => [replica, victim]
            .map(|node| DeadHost::at(&shop.cluster.addrs()[node]))
            .into(),
        false => Vec::new(),
    };
    let killed = Instant::now();
    // `/healthz` every 100 ms for WATCH: what it said, and for how long.
    let expected = (200, "degraded".to_owned(), vec![victim_addr.clone()]);
    let mut timeline: Vec<(Duration, Said)> = Vec::new();
    let (mut polls, mut as_expected, mut down) = (0, 0, 0);
    let served_before = served.load(Ordering::Relaxed);
    while killed.elapsed() < WATCH {
        let health = request(&internal, "GET", "/healthz", None, None);
        let json: serde_json::Value = serde_json::from_str(&health.body).unwrap_or_default();
        let said = (
            health.status,
            json["status"].as_str().unwrap_or_default().to_owned(),
            json["redis_failing_nodes"]
                .as_array()
                .map(|nodes| {
                    let nodes = nodes.iter().filter_map(|n| n.as_str());
                    nodes.map(str::to_owned).collect()
                })
                .unwrap_or_default(),
        );
        // Counted from the second round of the health check on: the first
        // may meet the node before any breaker opened (503 for a moment).
        if killed.elapsed() >= COUNTED_FROM {
            polls += 1;
            as_expected += usize::from(said == expected);
            down += usize::from(said.0 == 503);
        }
        if timeline.last().is_none_or(|(_, last)| *last != said) {
            timeline.push((killed.elapsed(), said));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let served_after = served.load(Ordering::Relaxed) - served_before;
    stop_traffic.store(true, Ordering::Relaxed);
    for t in traffic {
        t.join().unwrap();
    }
    println!(
        "a dead primary (host gone: {host_gone}): of {polls} /healthz answers from {COUNTED_FROM:?} to {WATCH:?} after \
         the kill, {as_expected} 200 \"degraded\" naming it alone, {down} 503; /api/me served whole \
         {served_after} times, degraded {} times; /healthz said {timeline:?}",
        degraded.load(Ordering::Relaxed)
    );
    // Before the fix (three runs): 503 in 50-85% of the answers, "degraded"
    // naming it alone in 10-40%. After: idle, 503 in 0-4% and "degraded"
    // naming it alone in 80-90% (the others name a live primary too for a
    // moment, as the stuck connection is replaced); in a full CI run beside
    // the other tests, 503 in 25% (three spells of at most 0.9 s, every
    // primary failing fast while the starved shop missed its budgets) and
    // "degraded" alone in 40%. The bounds sit between the two.
    assert!(
        down * 20 < polls * 9,
        "/healthz said 503 in {down} of {polls} answers: {timeline:?}"
    );
    assert!(
        as_expected * 5 > polls,
        "/healthz said 200 \"degraded\" naming only {victim_addr} in {as_expected} of \
         {polls} answers: {timeline:?}"
    );
    assert!(
        served_after > 0,
        "no session on a live primary was served after the kill"
    );
    assert!(stop(child).success());
}
