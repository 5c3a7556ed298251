//! The shop behind a real Varnish (`deploy/varnish/shop.vcl`, a `varnishd` per
//! test from the test kit), two `shop serve` behind it, driven as browsers and
//! an operator do: a public page is an edge hit for a browser sending its
//! cookie, no `Set-Cookie` is kept or replayed, personal pages are never cached,
//! each page view is counted once wherever its HTML came from, and a change is
//! seen through the edge as soon as its command returns (or, when the edge could
//! not be purged, once `shop items purge` finished it). On one node with SQLite
//! and PostgreSQL here; on a cluster in `cluster.rs`.

use std::process::Command;
use std::time::{Duration, Instant};

use shop_testkit::{TestDb, TestVarnish};

use crate::e2e::{Binary, Reply, request, request_with, seeded_on, serve, stop, succeed};

/// Whether the edge says it served `reply` from its cache.
fn edge_hit(reply: &Reply) -> bool {
    reply.header("server-timing").as_deref() == Some("edge;desc=hit")
}

/// The price item `id`'s page shows (its `<p class="price">`).
fn price(reply: &Reply) -> String {
    reply
        .body
        .split("<p class=\"price\">")
        .nth(1)
        .and_then(|rest| rest.split('<').next())
        .unwrap_or_default()
        .to_owned()
}

/// Logs `name` in through the edge: its session cookie.
fn log_in_at(addr: &str, name: &str) -> String {
    let form = format!("name={name}&password={name}-password");
    let reply = request(addr, "POST", "/login", None, Some(&form));
    assert_eq!(reply.status, 303, "{}", reply.body);
    reply.session_cookie().expect("a login sets the cookie")
}

/// The whole story, `shop` being the shop's command (its Redis, its database)
/// and `views` reading item N's count in the view ranking.
pub async fn behind_the_edge(shop: impl Fn() -> Command, views: impl AsyncFn(u64) -> f64) {
    let port = TestVarnish::free_port();
    let purge_url = format!("http://127.0.0.1:{port}/");
    let edge_flag = ["--edge-purge-url", purge_url.as_str()];
    let (first, web1) = serve(shop(), &edge_flag);
    let (second, web2) = serve(shop(), &[&edge_flag[..], &["--no-workers"]].concat());
    let varnish = TestVarnish::start_on(port, &[web1.as_str(), web2.as_str()]);
    let edge = varnish.addr();

    // A browser gets its cookie from the page's /api/me call (through the edge,
    // never cached), then asks for item pages sending it.
    let me = request(&edge, "GET", "/api/me", None, None);
    assert_eq!(me.status, 200, "{}", me.body);
    assert!(!edge_hit(&me));
    assert_eq!(
        me.header("cache-control").as_deref(),
        Some("private, no-store")
    );
    let cookie = me.session_cookie().expect("/api/me gives the cookie");
    let pages: Vec<Reply> = (0..4)
        .map(|_| request(&edge, "GET", "/items/3", Some(&cookie), None))
        .collect();
    assert!(pages.iter().all(|p| p.status == 200));
    assert!(
        pages[1..].iter().all(edge_hit),
        "a cached page is an edge hit for a browser sending its cookie: {:?}",
        pages
            .iter()
            .map(|p| p.header("server-timing"))
            .collect::<Vec<_>>()
    );
    // No cookie is ever kept or replayed by the edge: not to the browser that
    // sent one, not to a new visitor (whose cookie comes from /api/me).
    let stranger = request(&edge, "GET", "/items/3", None, None);
    assert!(edge_hit(&stranger));
    assert_eq!(
        stranger.header("x-cache"),
        None,
        "what the shop did then is no news"
    );
    // A query the shop does not read is the same page (no new object at the
    // edge), and so is any `Host`.
    assert!(edge_hit(&request(
        &edge,
        "GET",
        "/items/3?x=12345",
        None,
        None
    )));
    for host in ["x1.example", "X2.EXAMPLE", "127.0.0.1."] {
        let other = request_with(&edge, "GET", "/items/3", None, None, &[("Host", host)]);
        assert!(
            edge_hit(&other),
            "{host}: {:?}",
            other.header("server-timing")
        );
    }
    for reply in pages.iter().chain([&stranger]) {
        assert_eq!(
            reply.header("set-cookie"),
            None,
            "{:?}",
            reply.header("set-cookie")
        );
    }

    // Each view counted once. Through the edge: the page's script names the item
    // to /api/me (the edge said it served the page), and only that counts.
    let before = views(3).await;
    let me = request(&edge, "GET", "/api/me?item=3", Some(&cookie), None);
    assert_eq!(me.status, 200, "{}", me.body);
    assert!(me.body.contains("\"id\":3"), "in the history: {}", me.body);
    counted_once(&views, 3, before + 1.0).await;
    // From the shop itself: the page's own request counts, its script names none.
    let before = views(5).await;
    let page = request(&web1, "GET", "/items/5", Some(&cookie), None);
    assert_eq!(page.status, 200);
    assert_eq!(page.header("server-timing"), None);
    assert_eq!(
        request(&web1, "GET", "/api/me", Some(&cookie), None).status,
        200
    );
    counted_once(&views, 5, before + 1.0).await;
    // A made-up or bad item named is no view.
    assert_eq!(
        request(&edge, "GET", "/api/me?item=999999", Some(&cookie), None).status,
        200
    );
    assert_eq!(
        request(&edge, "GET", "/api/me?item=kettle", Some(&cookie), None).status,
        400
    );

    // A change is seen through the edge as soon as its command returns.
    assert_ne!(price(&stranger), "$43.21");
    succeed(
        shop()
            .args(["items", "--edge-purge-url", &purge_url])
            .args(["update", "3", "--price-cents", "4321"]),
    );
    let fresh = request(&edge, "GET", "/items/3", Some(&cookie), None);
    assert_eq!(price(&fresh), "$43.21");
    assert!(!edge_hit(&fresh), "fetched again");
    assert!(edge_hit(&request(&edge, "GET", "/items/3", None, None)));

    // A page the edge stores just after a purge (its fetch from the origin was
    // in flight when the purge came, which cannot reach it) is dropped by the
    // same purge sent again a moment later.
    let purger = shop_page_cache::EdgePurger::new(vec![purge_url.parse().unwrap()]);
    let tags = [shop_app::page_tags::item(
        shop_cache::domain::ItemId::new(3).unwrap(),
    )];
    let again = shop_page_cache::EDGE_REPURGE_AFTER;
    for tries in 1.. {
        purger.purge(&tags).await.unwrap();
        let purged = Instant::now();
        request(&edge, "GET", "/items/3", None, None);
        let kept = edge_hit(&request(&edge, "GET", "/items/3", None, None));
        // Stored again well before the purge is sent again (on a busy machine
        // it may not be: then try again).
        if kept && purged.elapsed() < again / 2 {
            break;
        }
        assert!(tries < 5, "the edge never kept the page again in time");
        purger.settle().await;
    }
    purger.settle().await;
    assert!(
        !edge_hit(&request(&edge, "GET", "/items/3", None, None)),
        "dropped by the purge sent again"
    );

    // An edge that could not be purged: the command says so, the edge serves the
    // old page until `shop items purge` finishes the job.
    let dead = format!("http://127.0.0.1:{}/", TestVarnish::free_port());
    let failed = shop()
        .args(["items", "--edge-purge-url", &dead])
        .args(["update", "3", "--price-cents", "5555"])
        .output()
        .unwrap();
    assert!(!failed.status.success());
    let said = String::from_utf8_lossy(&failed.stderr);
    assert!(said.contains("shop items purge 3"), "{said}");
    assert_eq!(
        price(&request(&edge, "GET", "/items/3", None, None)),
        "$43.21"
    );
    succeed(
        shop()
            .args(["items", "--edge-purge-url", &purge_url])
            .args(["purge", "3"]),
    );
    assert_eq!(
        price(&request(&edge, "GET", "/items/3", None, None)),
        "$55.55"
    );

    // Personal pages are never cached: two users through the edge, each sees
    // their own, every time.
    let alice = log_in_at(&edge, "alice");
    let bob = log_in_at(&edge, "bob");
    for _ in 0..2 {
        for (cookie, name, other) in [(&alice, "alice", "bob"), (&bob, "bob", "alice")] {
            for path in ["/api/me", "/cart", "/account"] {
                let reply = request(&edge, "GET", path, Some(cookie), None);
                assert_eq!(reply.status, 200, "{path}: {}", reply.body);
                if path != "/cart" {
                    assert!(reply.body.contains(name), "{path} shows {name}");
                }
                assert!(!reply.body.contains(other), "{path} shows {other}'s");
                assert_eq!(reply.header("server-timing"), None, "{path} passed");
                assert_eq!(
                    reply.header("cache-control").as_deref(),
                    Some("private, no-store"),
                    "{path}"
                );
            }
        }
    }

    // Only the purgers' ACL may purge.
    assert_eq!(purge_from("127.0.0.2", &edge).await, 403);
    assert_eq!(purge_from("127.0.0.1", &edge).await, 200);

    drop(varnish);
    assert!(stop(second).success());
    assert!(stop(first).success());
}

/// Waits until item `item`'s count reaches `expected`, then checks it stays
/// there for ten flush intervals (a second count would arrive within them).
async fn counted_once(views: &impl AsyncFn(u64) -> f64, item: u64, expected: f64) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while views(item).await < expected {
        assert!(
            Instant::now() < deadline,
            "item {item}'s view never counted"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let settled = Instant::now() + Duration::from_secs(1);
    while Instant::now() < settled {
        assert_eq!(
            views(item).await,
            expected,
            "item {item}'s view counted twice"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The status of `PURGE /` (tag `i3`) sent to `edge` from the local address `from`.
async fn purge_from(from: &str, edge: &str) -> u16 {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind(format!("{from}:0").parse().unwrap()).unwrap();
    let mut stream = socket.connect(edge.parse().unwrap()).await.unwrap();
    stream
        .write_all(b"PURGE / HTTP/1.1\r\nHost: edge\r\nxkey-purge: i3\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut raw = String::new();
    stream.read_to_string(&mut raw).await.unwrap();
    raw[9..12].parse().unwrap()
}

/// The ranking's count of `item` in the one-node layout (the book's `viewed:`
/// counts down: the most viewed has the lowest score).
async fn views_on(redis: &shop_testkit::TestRedis, item: u64) -> f64 {
    let score: Option<f64> = redis::cmd("ZSCORE")
        .arg("viewed:")
        .arg(item)
        .query_async(&mut redis.conn().await)
        .await
        .unwrap();
    -score.unwrap_or(0.0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn behind_varnish_on_sqlite() {
    let app = seeded_on(TestDb::sqlite(), 30).await;
    behind_the_edge(|| app.shop(), async |item| views_on(&app.redis, item).await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn behind_varnish_on_postgres() {
    let Some(db) = TestDb::postgres().await else {
        return;
    };
    let app = seeded_on(db, 30).await;
    behind_the_edge(|| app.shop(), async |item| views_on(&app.redis, item).await).await;
}

/// An answer that reaches the edge already past its windows (the shop serving
/// a page it kept while it cannot render it: its `Age` beyond `s-maxage` and
/// `stale-while-revalidate`) is kept a moment, not fetched again for every
/// request. The origin here is a stand-in that answers so.
#[test]
fn an_answer_older_than_its_windows_is_kept_a_moment_not_fetched_per_request() {
    use std::io::{BufRead, BufReader, Write};
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    let origin = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = origin.local_addr().unwrap().to_string();
    let fetches = Arc::new(AtomicUsize::new(0));
    let counted = fetches.clone();
    std::thread::spawn(move || {
        for stream in origin.incoming() {
            let Ok(mut stream) = stream else { continue };
            let mut head = String::new();
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            while reader.read_line(&mut head).is_ok_and(|n| n > 2) && !head.ends_with("\r\n\r\n") {}
            let answer = if head.starts_with("GET /healthz") {
                "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok".to_owned()
            } else {
                counted.fetch_add(1, Ordering::SeqCst);
                "HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nCache-Control: public, max-age=0, \
                 s-maxage=300, stale-while-revalidate=60, stale-if-error=3600\r\nAge: 1000\r\n\
                 Content-Length: 3\r\nConnection: close\r\n\r\nold"
                    .to_owned()
            };
            let _ = stream.write_all(answer.as_bytes());
        }
    });
    let varnish = TestVarnish::start_on(TestVarnish::free_port(), &[addr.as_str()]);
    let edge = varnish.addr();
    crate::e2e::eventually(
        "the edge serves the stand-in's page",
        || request(&edge, "GET", "/items/1", None, None),
        |reply| reply.status == 200 && reply.body == "old",
    );
    let before = fetches.load(Ordering::SeqCst);
    for _ in 0..5 {
        let reply = request(&edge, "GET", "/items/1", None, None);
        assert_eq!((reply.status, reply.body.as_str()), (200, "old"));
    }
    assert_eq!(
        fetches.load(Ordering::SeqCst),
        before,
        "served from the edge"
    );
}
