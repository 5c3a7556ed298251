//! Fault drills against the real `shop serve` under `shop load`: Redis stopped for
//! 5 s, and the SQLite database write-locked by another process for 20 s. Each drill
//! prints its figures (copied into BENCHMARKS.md, "Fault drills") and asserts what
//! the shop promises: pages keep being served at their normal pace, writes fail
//! fast with 503, nothing answers 500, and service is whole again within a second of
//! the fault ending.
//!
//! Probes are plain blocking HTTP clients on threads, one request per connection,
//! each request timed and stamped with the moment it started, so the figures split
//! into "before", "during" and "after" the fault.

use std::process::{Child, Command};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use crate::e2e::{Binary, Reply, checkout_form, log_in, request, request_with, seeded, stop};
use shop_testapp::TestApp;

/// One request a probe made.
#[derive(Debug, Clone)]
pub(crate) struct Sample {
    /// Which probe: "page", "cart", "inventory", "checkout", "buy".
    pub(crate) kind: &'static str,
    /// When it started, from the drill's start.
    pub(crate) at: Duration,
    pub(crate) took: Duration,
    pub(crate) status: u16,
}

/// Percentile of latencies in milliseconds.
pub(crate) fn pct(samples: &[&Sample], p: f64) -> f64 {
    if samples.is_empty() {
        return 0.0;
    }
    let mut ms: Vec<f64> = samples.iter().map(|s| s.took.as_secs_f64() * 1e3).collect();
    ms.sort_by(f64::total_cmp);
    let i = ((ms.len() as f64 * p).ceil() as usize).clamp(1, ms.len()) - 1;
    ms[i]
}

pub(crate) fn select<'a>(
    all: &'a [Sample],
    kind: &str,
    from: Duration,
    to: Duration,
) -> Vec<&'a Sample> {
    all.iter()
        .filter(|s| s.kind == kind && s.at >= from && s.at < to)
        .collect()
}

pub(crate) fn summary(all: &[Sample], kind: &str, from: Duration, to: Duration) -> String {
    let s = select(all, kind, from, to);
    let mut statuses: Vec<(u16, usize)> = Vec::new();
    for x in &s {
        match statuses.iter_mut().find(|(st, _)| *st == x.status) {
            Some((_, n)) => *n += 1,
            None => statuses.push((x.status, 1)),
        }
    }
    statuses.sort();
    format!(
        "{kind:>9}: n={:>4} p50={:>7.1} ms p99={:>7.1} ms max={:>7.1} ms statuses={statuses:?}",
        s.len(),
        pct(&s, 0.50),
        pct(&s, 0.99),
        pct(&s, 1.0),
    )
}

/// One drill: its clock, `shop load` in the background, and the probes, each
/// recording its answers until the drill ends.
pub(crate) struct Drill {
    start: Instant,
    end_at: Duration,
    addr: String,
    load: Child,
    samples: Arc<Mutex<Vec<Sample>>>,
    probes: Vec<thread::JoinHandle<()>>,
}

impl Drill {
    /// Starts the clock, and `shop load` against `addr` until `end_at`.
    fn start(shop: &TestApp, addr: &str, end_at: Duration) -> Self {
        Self::start_with(shop.shop(), addr, end_at)
    }

    /// [`Drill::start`] with `cmd`, the `shop` command of the shop under test.
    pub(crate) fn start_with(mut cmd: Command, addr: &str, end_at: Duration) -> Self {
        let start = Instant::now();
        cmd.args([
            "load",
            "--target",
            addr,
            "--duration",
            &end_at.as_secs().to_string(),
            "--connections",
            "8",
            "--rate",
            "200",
            "--items",
            "200",
            "--quiet",
        ]);
        Self {
            start,
            end_at,
            addr: addr.to_owned(),
            load: cmd.spawn().unwrap(),
            samples: Arc::default(),
            probes: Vec::new(),
        }
    }

    /// A probe thread: calls `send` (with the shop's address and a counter), then
    /// sleeps `pause`, until the drill ends, recording each answer.
    pub(crate) fn probe(
        &mut self,
        kind: &'static str,
        pause: Duration,
        mut send: impl FnMut(&str, u64) -> Reply + Send + 'static,
    ) {
        let (start, until) = (self.start, self.start + self.end_at);
        let (addr, samples) = (self.addr.clone(), self.samples.clone());
        self.probes.push(thread::spawn(move || {
            let mut n = 0;
            while Instant::now() < until {
                let began = Instant::now();
                let reply = send(&addr, n);
                samples.lock().unwrap().push(Sample {
                    kind,
                    at: began - start,
                    took: began.elapsed(),
                    status: reply.status,
                });
                n += 1;
                thread::sleep(pause);
            }
        }));
    }

    /// Time on the drill's clock.
    pub(crate) fn elapsed(&self) -> Duration {
        self.start.elapsed()
    }

    /// Sleeps until `at` on the drill's clock.
    pub(crate) fn sleep_until(&self, at: Duration) {
        thread::sleep(at.saturating_sub(self.elapsed()));
    }

    /// Waits for the probes and the load to end: every sample, and the load's report.
    pub(crate) fn finish(self) -> (Vec<Sample>, String) {
        for p in self.probes {
            p.join().unwrap();
        }
        let out = self.load.wait_with_output().unwrap();
        let all = self.samples.lock().unwrap().clone();
        (all, String::from_utf8_lossy(&out.stdout).into_owned())
    }
}

/// Views items 1..=n twice, so they rank in `viewed:` and their pages get cached.
fn warm_item_pages(addr: &str, n: u64) {
    for _ in 0..2 {
        for i in 1..=n {
            assert_eq!(
                request(addr, "GET", &format!("/items/{i}"), None, None).status,
                200
            );
        }
    }
}

#[tokio::test]
async fn redis_stopped_for_five_seconds() {
    let mut shop = seeded(200).await;
    // Every client here is this machine's one address.
    let (child, addr) = shop.serve(&[
        "--uncached-per-address",
        "10000000",
        "--counted-views-per-address",
        "10000000",
    ]);
    warm_item_pages(&addr, 20);

    let (down_at, up_at, end_at) = (
        Duration::from_secs(3),
        Duration::from_secs(8),
        Duration::from_secs(12),
    );
    let mut drill = Drill::start(&shop, &addr, end_at);
    for p in 0..2u64 {
        drill.probe("page", Duration::from_millis(5), move |a, n| {
            request(
                a,
                "GET",
                &format!("/items/{}", 1 + (n + p * 7) % 20),
                None,
                None,
            )
        });
    }
    let mut cookie: Option<String> = None;
    drill.probe("cart", Duration::from_millis(10), move |a, n| {
        let form = format!("item={}&count=1", 1 + n % 5);
        let reply = request(a, "POST", "/cart", cookie.as_deref(), Some(&form));
        if let Some(c) = reply.session_cookie() {
            cookie = Some(c);
        }
        reply
    });

    drill.sleep_until(down_at);
    shop.redis.kill();
    drill.sleep_until(up_at);
    shop.redis.restart();
    let restarted = drill.elapsed();
    let (all, report) = drill.finish();
    assert!(stop(child).success());

    // Requests that started during the outage, less its first half second (requests
    // in flight when Redis died wait out their own command) and its last second (a
    // request started then may be answered after Redis is back).
    let outage = (
        down_at + Duration::from_millis(500),
        up_at - Duration::from_secs(1),
    );
    // Service is whole again when every cart write from then on succeeds.
    let carts: Vec<&Sample> = select(&all, "cart", restarted, end_at);
    let first_good_after = carts
        .iter()
        .rposition(|s| s.status != 303)
        .map_or(0, |i| i + 1);
    let recovered_at = carts
        .get(first_good_after)
        .map(|s| s.at)
        .expect("cart writes succeed again after Redis returns");
    let recovery = recovered_at.saturating_sub(restarted);

    println!(
        "DRILL redis stopped {down_at:?}..{restarted:?} (restart took effect at {restarted:?})"
    );
    println!(
        "  before  {}",
        summary(&all, "page", Duration::ZERO, down_at)
    );
    println!("  outage  {}", summary(&all, "page", outage.0, outage.1));
    println!("  after   {}", summary(&all, "page", restarted, end_at));
    println!(
        "  before  {}",
        summary(&all, "cart", Duration::ZERO, down_at)
    );
    println!("  outage  {}", summary(&all, "cart", outage.0, outage.1));
    println!("  after   {}", summary(&all, "cart", restarted, end_at));
    println!("  full service {recovery:?} after Redis returned");
    println!("  shop load over the whole drill:\n{report}");

    let pages_before = select(&all, "page", Duration::ZERO, down_at);
    let pages_out = select(&all, "page", outage.0, outage.1);
    let carts_out = select(&all, "cart", outage.0, outage.1);
    assert!(!pages_out.is_empty() && !carts_out.is_empty());
    assert!(
        all.iter()
            .filter(|s| s.kind == "page")
            .all(|s| s.status == 200),
        "item pages are served from the database throughout"
    );
    assert!(
        carts_out.iter().all(|s| s.status == 503),
        "cart writes answer 503 while Redis is down"
    );
    // Fail fast: no request waits out a Redis timeout (2 s) during the outage.
    assert!(pct(&pages_out, 1.0) < 1_000.0, "{}", pct(&pages_out, 1.0));
    assert!(pct(&carts_out, 1.0) < 1_000.0, "{}", pct(&carts_out, 1.0));
    // Pages keep their pace: p99 within 2x of normal (with a floor for the noise of
    // a debug build sharing two cores with the load generator).
    let (normal, during) = (pct(&pages_before, 0.99), pct(&pages_out, 0.99));
    assert!(
        during <= (2.0 * normal).max(50.0),
        "p99 {normal} -> {during} ms"
    );
    assert!(
        recovery <= Duration::from_secs(1),
        "recovered after {recovery:?}"
    );
}

#[tokio::test]
async fn database_write_locked_for_twenty_seconds() {
    let shop = seeded(200).await;
    // Item 1 on sale (its stock cached in Redis by the row refresher).
    shop.sale_start("1", "1000");
    // A high per-user limit, so every buy of alice's is a winner that must write
    // its order (refusals are Redis's alone and never wait on the database).
    let (child, addr) = shop.serve(&[
        "--flash-limit",
        "1000",
        // Every client here is this machine's one address.
        "--uncached-per-address",
        "10000000",
        "--counted-views-per-address",
        "10000000",
    ]);
    warm_item_pages(&addr, 20);
    let alice = log_in(&addr, "alice");
    assert_eq!(
        request(&addr, "POST", "/cart", Some(&alice), Some("item=3&count=1")).status,
        303
    );
    // The sale's row is in Redis before the lock.
    let deadline = Instant::now() + Duration::from_secs(10);
    while request(&addr, "GET", "/api/inventory/1", None, None).status != 200 {
        assert!(
            Instant::now() < deadline,
            "the sale row never reached Redis"
        );
        thread::sleep(Duration::from_millis(100));
    }

    let (lock_at, unlock_at, end_at) = (
        Duration::from_secs(2),
        Duration::from_secs(22),
        Duration::from_secs(25),
    );
    let mut drill = Drill::start(&shop, &addr, end_at);
    drill.probe("page", Duration::from_millis(5), |a, n| {
        request(a, "GET", &format!("/items/{}", 1 + n % 20), None, None)
    });
    drill.probe("uncached", Duration::from_millis(20), |a, n| {
        request(a, "GET", &format!("/items/{}", 100 + n % 100), None, None)
    });
    drill.probe("inventory", Duration::from_millis(10), |a, _| {
        request(a, "GET", "/api/inventory/1", None, None)
    });
    let c = alice.clone();
    drill.probe("checkout", Duration::from_millis(200), move |a, n| {
        let form = checkout_form(a, &c, &format!("drill-{n}"));
        let reply = request(a, "POST", "/checkout", Some(&c), Some(&form));
        // Put something back in the cart, so the next checkout has work to do.
        request(a, "POST", "/cart", Some(&c), Some("item=3&count=1"));
        reply
    });
    drill.probe("buy", Duration::from_millis(200), move |a, n| {
        let key = format!("buy-{n}");
        request_with(
            a,
            "POST",
            "/api/flash/1/buy",
            Some(&alice),
            Some(""),
            &[("Idempotency-Key", &key)],
        )
    });

    drill.sleep_until(lock_at);
    let lock = shop.test_db.hold_write_lock_async().await;
    let locked = drill.elapsed();
    drill.sleep_until(unlock_at);
    lock.release();
    let unlocked = drill.elapsed();
    let (all, report) = drill.finish();
    assert!(stop(child).success());

    // Requests started while the lock was held, less the last 3 s (a write started
    // then waits its ~2 s and may find the lock gone).
    let during = (
        locked + Duration::from_millis(500),
        unlocked - Duration::from_secs(3),
    );
    println!("DRILL database write-locked {locked:?}..{unlocked:?}");
    for kind in ["page", "uncached", "inventory", "checkout", "buy"] {
        println!("  before  {}", summary(&all, kind, Duration::ZERO, locked));
        println!("  locked  {}", summary(&all, kind, during.0, during.1));
        println!("  after   {}", summary(&all, kind, unlocked, end_at));
    }
    println!("  shop load over the whole drill:\n{report}");

    for kind in ["page", "uncached", "inventory"] {
        let s = select(&all, kind, during.0, during.1);
        assert!(!s.is_empty(), "{kind}");
        assert!(s.iter().all(|x| x.status == 200), "{kind} keeps serving");
        assert!(pct(&s, 0.99) < 1_000.0, "{kind} p99 {}", pct(&s, 0.99));
    }
    for kind in ["checkout", "buy"] {
        let s = select(&all, kind, during.0, during.1);
        assert!(!s.is_empty(), "{kind}");
        assert!(
            s.iter().all(|x| x.status == 503),
            "{kind} answers 503 while the database is locked: {s:?}"
        );
        // The bound by design: waiting for SQLite's one write connection (2 s at
        // most) and then for the lock (1 s); checkout and buy queue for that one
        // connection behind each other. Half a second on top for the machine.
        assert!(
            pct(&s, 1.0) < 3_500.0,
            "{kind} fails fast: {}",
            pct(&s, 1.0)
        );
        assert!(
            all.iter()
                .filter(|x| x.kind == kind)
                .all(|x| x.status < 500 || x.status == 503),
            "{kind}: never a 500"
        );
    }
    // Writes work again once the lock is gone.
    let after = select(&all, "checkout", unlocked + Duration::from_secs(1), end_at);
    assert!(after.iter().any(|x| x.status == 303), "{after:?}");
    let after = select(&all, "buy", unlocked + Duration::from_secs(1), end_at);
    assert!(after.iter().any(|x| x.status == 200), "{after:?}");
}

/// What one checkout of the disk-full drill was answered.
#[derive(Debug, Clone)]
struct Checkout {
    key: String,
    status: u16,
    order: Option<i64>,
}

/// A checkout as JSON with idempotency key `key`, after putting an item in the
/// cart (a checkout that failed leaves it there; a placed one empties it).
fn checkout(addr: &str, cookie: &str, key: &str) -> (Reply, Checkout) {
    request(addr, "POST", "/cart", Some(cookie), Some("item=3&count=1"));
    let reply = request_with(
        addr,
        "POST",
        "/checkout",
        Some(cookie),
        Some(&checkout_form(addr, cookie, key)),
        &[("Accept", "application/json")],
    );
    let order = (reply.status == 200)
        .then(|| serde_json::from_str::<serde_json::Value>(&reply.body).unwrap())
        .map(|body| {
            assert_eq!(body["outcome"], "placed", "{body}");
            body["order_id"].as_i64().unwrap()
        });
    let answer = Checkout {
        key: key.to_owned(),
        status: reply.status,
        order,
    };
    (reply, answer)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn disk_full_for_five_seconds() {
    let Some(disk) = shop_testkit::SmallDisk::mount(32) else {
        return;
    };
    let shop = crate::e2e::seeded_on(shop_testkit::TestDb::sqlite_in(disk.path()), 200).await;
    // Enough of the item the drill checks out for every checkout to be placed.
    let three = shop_cache::domain::ItemId::new(3).unwrap();
    assert!(shop.db.set_stock(three, 1_000_000).await.unwrap());
    let (child, addr) = shop.serve(&["--write-grace", "2"]);
    warm_item_pages(&addr, 20);
    let alice = log_in(&addr, "alice");
    // A reader in a long transaction (a report, a backup) keeps the WAL from being
    // reset: every commit must grow it, so a full disk stops every write.
    let reader = shop.test_db.pin_wal().await;

    let (full_at, freed_at, end_at) = (
        Duration::from_secs(3),
        Duration::from_secs(8),
        Duration::from_secs(12),
    );
    let mut drill = Drill::start(&shop, &addr, end_at);
    drill.probe("page", Duration::from_millis(5), |a, n| {
        request(a, "GET", &format!("/items/{}", 1 + n % 20), None, None)
    });
    drill.probe("health", Duration::from_millis(100), |a, _| {
        request(a, "GET", "/healthz", None, None)
    });
    let answers: Arc<Mutex<Vec<Checkout>>> = Arc::default();
    let (c, log) = (alice.clone(), answers.clone());
    drill.probe("checkout", Duration::from_millis(50), move |a, n| {
        let (reply, answer) = checkout(a, &c, &format!("drill-{n}"));
        log.lock().unwrap().push(answer);
        reply
    });

    drill.sleep_until(full_at);
    disk.fill();
    let filled = drill.elapsed();
    drill.sleep_until(freed_at);
    let freeing = drill.elapsed();
    disk.free();
    let freed = drill.elapsed();
    let (all, report) = drill.finish();

    // What a shopper told "try again" does: the same key again.
    let mut answers = answers.lock().unwrap().clone();
    let failed: Vec<String> = answers
        .iter()
        .filter(|a| a.status != 200)
        .map(|a| a.key.clone())
        .collect();
    for key in &failed {
        let (_, answer) = checkout(&addr, &alice, key);
        assert_eq!(answer.status, 200, "{key} retried after the fault");
        answers.push(answer);
    }
    reader.release().await;
    // A crash, not a shutdown: what was confirmed must be on disk already.
    let mut child = child;
    child.kill().unwrap();
    child.wait().unwrap();
    shop.db.close().await;
    let db = shop_db::Db::connect(shop.test_db.url()).await.unwrap();
    let rows: Vec<(String, i64)> = sqlx::query_as(
        "SELECT idempotency_key, id FROM orders WHERE idempotency_key LIKE 'drill-%'",
    )
    .fetch_all(db.read_pool())
    .await
    .unwrap();
    db.close().await;
    let committed: std::collections::BTreeMap<String, i64> = rows.into_iter().collect();
    let placed: std::collections::BTreeMap<String, i64> = answers
        .iter()
        .filter_map(|a| Some((a.key.clone(), a.order?)))
        .collect();
    let lost = placed
        .iter()
        .filter(|(k, id)| committed.get(*k) != Some(id))
        .count();
    let phantom = committed
        .keys()
        .filter(|k| !placed.contains_key(*k))
        .count();

    // Requests that started while the disk was full, less a margin at each end: a
    // request in flight when the space came back may well commit.
    let during = (
        filled + Duration::from_millis(200),
        freeing - Duration::from_millis(200),
    );
    let checkouts_full = select(&all, "checkout", during.0, during.1);
    let first_placed_after = select(&all, "checkout", freed, end_at)
        .iter()
        .find(|s| s.status == 200)
        .map(|s| s.at + s.took - freed)
        .expect("checkouts are placed again after the space came back");
    let health_ok_after = select(&all, "health", freed, end_at)
        .iter()
        .find(|s| s.status == 200)
        .map(|s| s.at + s.took - freed)
        .expect("health is ok again");
    let health_full = select(&all, "health", during.0, during.1);
    let read_only_from = health_full
        .iter()
        .find(|s| s.status == 503)
        .map(|s| s.at - filled);
    println!("DRILL disk full {filled:?}..{freed:?} (a reader pinning the WAL)");
    for kind in ["page", "checkout", "health"] {
        println!("  before  {}", summary(&all, kind, Duration::ZERO, filled));
        println!("  full    {}", summary(&all, kind, during.0, during.1));
        println!("  after   {}", summary(&all, kind, freed, end_at));
    }
    println!(
        "  answers: {} placed (of them {} on retrying with their keys the checkouts that had failed), {} committed after a kill -9 and reopening: lost {lost}, phantom {phantom}",
        placed.len(),
        failed.len(),
        committed.len()
    );
    println!(
        "  /healthz 503 from {read_only_from:?} after the disk filled; after the space came back: a checkout placed in {first_placed_after:?}, health 200 in {health_ok_after:?}"
    );
    println!("  shop load over the whole drill:\n{report}");

    assert_eq!((lost, phantom), (0, 0), "confirmed = committed");
    assert!(!failed.is_empty(), "the full disk failed checkouts");
    assert!(
        checkouts_full.iter().all(|s| s.status == 503),
        "every checkout on a full disk is a 503: {checkouts_full:?}"
    );
    assert!(
        all.iter()
            .filter(|s| s.kind == "page")
            .all(|s| s.status == 200),
        "item pages are served throughout"
    );
    assert!(
        read_only_from.is_some(),
        "past the grace, /healthz answers 503: {health_full:?}"
    );
    // Back by itself: the next checkout and the next fresh health answer (reused
    // for up to a second) are good.
    assert!(
        first_placed_after < Duration::from_secs(1),
        "{first_placed_after:?}"
    );
    assert!(
        health_ok_after < Duration::from_secs(3),
        "{health_ok_after:?}"
    );
}
