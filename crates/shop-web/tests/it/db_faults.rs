//! The database failing under the web tier: a write lock held by another process
//! (SQLite), a closed pool. Writes answer 503 with `Retry-After` within seconds,
//! reads and logins keep working, and `/healthz` says which.

use std::time::{Duration, Instant};

use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use axum::response::Response;
use shop_web::flash::IDEMPOTENCY_KEY;
use tower::ServiceExt;

use shop_testapp::{PASSWORD, TestApp, form_post, json};

/// A shop on its own Redis and SQLite file: 30 items, item 1 on sale now.
async fn app() -> TestApp {
    let app = TestApp::start().await;
    app.start_sale(1, 10, 999).await;
    app
}

/// `/healthz`, after waiting out the second its last answer is reused for: its
/// status, its body, and how long it took. Every answer is the state of now,
/// for no cache to keep.
async fn health(app: &TestApp) -> (StatusCode, serde_json::Value, Duration) {
    tokio::time::sleep(Duration::from_millis(1_050)).await;
    let started = Instant::now();
    let resp = app.get("/healthz", None).await;
    let took = started.elapsed();
    let status = resp.status();
    assert_eq!(
        resp.headers()[header::CACHE_CONTROL],
        "no-store",
        "{status}"
    );
    if status == StatusCode::SERVICE_UNAVAILABLE {
        retry_after(&resp);
    }
    (status, json(resp).await, took)
}

/// The `Retry-After` of a 503: a small whole number of seconds.
fn retry_after(resp: &Response) -> u64 {
    let secs: u64 = resp
        .headers()
        .get(header::RETRY_AFTER)
        .expect("a 503 says when to retry")
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!((1..=5).contains(&secs), "Retry-After: {secs}");
    secs
}

/// A write answered while the database is locked: 503, `Retry-After`, quickly.
fn unavailable_fast(what: &str, resp: &Response, took: Duration) {
    assert_eq!(resp.status(), StatusCode::SERVICE_UNAVAILABLE, "{what}");
    retry_after(resp);
    assert!(took < Duration::from_secs(3), "{what} took {took:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_lock_held_elsewhere_is_a_quick_503_while_pages_and_logins_work() {
    let app = app().await;
    for name in ["lou", "max"] {
        app.db.create_user(name, PASSWORD).await.unwrap().unwrap();
    }
    let lou = app.log_in("lou").await;
    let add = app.post("/cart", Some(&lou), "item=2&count=1", true).await;
    assert_eq!(add.status(), StatusCode::OK);
    let (status, body, _) = health(&app).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body, serde_json::json!({"status": "ok"}));

    let lock = app.test_db.hold_write_lock_async().await;

    // Degraded, not down: every server shares this database, and a load balancer
    // must keep them serving what still works.
    let (status, body, took) = health(&app).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body, serde_json::json!({"status": "degraded"}));
    assert!(
        took < Duration::from_millis(1_500),
        "/healthz took {took:?}"
    );

    // Writes: 503 with Retry-After within seconds, as JSON and as a page.
    let started = Instant::now();
    let resp = app.post("/checkout", Some(&lou), "key=k1", true).await;
    unavailable_fast("checkout", &resp, started.elapsed());
    assert_eq!(json(resp).await["error"], "unavailable");
    // A flash buy's unit is held until the reconciler settles it: its retry
    // is told to come back then, when the same key gets the outcome.
    let started = Instant::now();
    let buy = form_post("/api/flash/1/buy", Some(&lou), true).header(IDEMPOTENCY_KEY, "k3");
    let resp = app.send(buy.body(Body::empty()).unwrap()).await;
    let took = started.elapsed();
    assert_eq!(
        resp.status(),
        StatusCode::SERVICE_UNAVAILABLE,
        "flash purchase"
    );
    assert!(
        took < Duration::from_secs(3),
        "flash purchase took {took:?}"
    );
    let hold = shop_web::WebConfig::default()
        .flash_hold
        .as_secs()
        .to_string();
    assert_eq!(resp.headers()[header::RETRY_AFTER], hold.as_str());
    assert_eq!(json(resp).await["error"], "not_recorded");
    let started = Instant::now();
    let resp = app.post("/checkout", Some(&lou), "key=k2", false).await;
    unavailable_fast("checkout form", &resp, started.elapsed());

    // Reads: pages and logins answer at once, 20 at a time.
    let reads = (0..20).map(|i| {
        let app = app.router.clone();
        let cookie = lou.clone();
        tokio::spawn(async move {
            let uri = if i % 2 == 0 {
                format!("/items/{}", i + 2)
            } else {
                "/".to_owned()
            };
            let req = Request::get(&uri)
                .header(header::COOKIE, cookie)
                .body(Body::empty())
                .unwrap();
            let started = Instant::now();
            let status = app.oneshot(req).await.unwrap().status();
            (uri, status, started.elapsed())
        })
    });
    for read in futures::future::join_all(reads).await {
        let (uri, status, took) = read.unwrap();
        assert_eq!(status, StatusCode::OK, "{uri}");
        assert!(took < Duration::from_secs(1), "{uri} took {took:?}");
    }
    let started = Instant::now();
    app.log_in("max").await;
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "a login reads only"
    );

    // The lock goes: healthy again, and the same checkout goes through.
    lock.release();
    let (status, body, _) = health(&app).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["status"], "ok");
    let form = app.checkout_form(&lou, "k1").await;
    let resp = app.post("/checkout", Some(&lou), &form, true).await;
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(json(resp).await["outcome"], "placed");
}

#[tokio::test]
async fn a_database_that_answers_nothing_is_down() {
    let app = app().await;
    app.db.close().await;
    let (status, body, took) = health(&app).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(body, serde_json::json!({"status": "down"}));
    assert!(
        took < Duration::from_millis(1_500),
        "/healthz took {took:?}"
    );
    let resp = app.get("/items/3", None).await;
    assert_eq!(resp.status(), StatusCode::SERVICE_UNAVAILABLE);
    retry_after(&resp);
}

#[tokio::test]
async fn health_checks_are_computed_once_a_second_however_many_ask() {
    let app = app().await;
    let first = app.get("/healthz", None).await;
    assert_eq!(first.status(), StatusCode::OK);
    // Taken after the first answer: the next ones within the second reuse it, so a
    // flood of checks cannot keep taking the write connection.
    let lock = app.test_db.hold_write_lock_async().await;
    let answers = futures::future::join_all((0..20).map(|_| app.get("/healthz", None))).await;
    for resp in answers {
        assert_eq!(json(resp).await["status"], "ok", "reused");
    }
    tokio::time::sleep(Duration::from_millis(1_050)).await;
    assert_eq!(
        json(app.get("/healthz", None).await).await["status"],
        "degraded"
    );
    lock.release();
}

/// A full disk under SQLite, driven as an operator's bad day would drive it: a
/// reader pins the WAL, the disk fills, shoppers keep checking out. Every answer
/// is "placed" with its order committed, or a 503 with `Retry-After`; `/healthz`
/// says "degraded", then 503 "read_only" past the write grace; when the space comes
/// back it is "ok" again by itself, checkouts go through at once, and the failed
/// ones, retried with their keys, are placed. Then the database is reopened (a
/// restart) and every placed answer is found in it, and nothing else.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_answers_503_never_a_false_placed_and_health_says_so() {
    let Some(disk) = shop_testkit::SmallDisk::mount(8) else {
        return;
    };
    let config = shop_web::WebConfig {
        write_grace: Duration::from_secs(1),
        ..shop_web::WebConfig::default()
    };
    let app = TestApp::builder()
        .config(config)
        .start_on(shop_testkit::TestDb::sqlite_in(disk.path()))
        .await;
    app.db.create_user("lou", PASSWORD).await.unwrap().unwrap();
    let lou = app.log_in("lou").await;
    let mut placed = std::collections::BTreeMap::new();
    let mut failed = Vec::new();
    // One checkout with a new key, after putting an item in the cart if it is empty.
    let checkout = async |key: String,
                          placed: &mut std::collections::BTreeMap<String, i64>,
                          failed: &mut Vec<String>| {
        if app.me(&lou).await["cart"]["count"].as_u64() == Some(0) {
            let add = app.post("/cart", Some(&lou), "item=2&count=1", true).await;
            assert_eq!(add.status(), StatusCode::OK);
        }
        let resp = app
            .post(
                "/checkout",
                Some(&lou),
                &app.checkout_form(&lou, &key).await,
                true,
            )
            .await;
        match resp.status() {
            StatusCode::OK => {
                let body = json(resp).await;
                assert_eq!(body["outcome"], "placed", "{body}");
                placed.insert(key, body["order_id"].as_i64().unwrap());
                true
            }
            StatusCode::SERVICE_UNAVAILABLE => {
                retry_after(&resp);
                failed.push(key);
                false
            }
            other => panic!("{key}: {other} {}", json(resp).await),
        }
    };
    for i in 0..3 {
        assert!(checkout(format!("before-{i}"), &mut placed, &mut failed).await);
    }
    let reader = app.test_db.pin_wal().await;

    disk.fill();
    for i in 0..20 {
        checkout(format!("full-{i}"), &mut placed, &mut failed).await;
    }
    assert!(!failed.is_empty(), "the full disk never failed a checkout");
    let (status, body, _) = health(&app).await;
    assert_eq!(
        (status, body["status"].as_str()),
        (StatusCode::OK, Some("degraded")),
        "{body}"
    );
    let (status, body, _) = health(&app).await;
    assert_eq!(
        (status, body["status"].as_str()),
        (StatusCode::SERVICE_UNAVAILABLE, Some("read_only")),
        "past the grace: {body}"
    );
    // Reads still work on this server.
    assert_eq!(app.get("/items/3", None).await.status(), StatusCode::OK);

    disk.free();
    let freed = Instant::now();
    let first = checkout("after-0".to_owned(), &mut placed, &mut failed).await;
    let back = freed.elapsed();
    assert!(first, "the first checkout after the space came back");
    let (status, body, _) = health(&app).await;
    assert_eq!(
        (status, body["status"].as_str()),
        (StatusCode::OK, Some("ok"))
    );
    eprintln!(
        "disk full over HTTP: {} placed, {} answered 503; the first checkout after the space came back placed in {back:?}",
        placed.len(),
        failed.len(),
    );
    for key in std::mem::take(&mut failed) {
        assert!(
            checkout(key.clone(), &mut placed, &mut failed).await,
            "{key}: retried after the fault"
        );
    }
    reader.release().await;

    // A restart: the database reopened from its file.
    app.db.close().await;
    let db = shop_db::Db::connect(app.test_db.url()).await.unwrap();
    let rows = sqlx::query("SELECT idempotency_key, id FROM orders")
        .fetch_all(db.read_pool())
        .await
        .unwrap();
    let committed: std::collections::BTreeMap<String, i64> = rows
        .iter()
        .map(|r| {
            use sqlx::Row;
            (r.get("idempotency_key"), r.get("id"))
        })
        .collect();
    db.close().await;
    assert_eq!(
        committed, placed,
        "every placed answer committed, and only those"
    );
}

/// A lock held elsewhere (or a write queue) makes writes wait, not fail: however
/// long it lasts, `/healthz` says "degraded" with 200, never "read_only": a
/// server that is only busy is not taken out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_write_lock_is_degraded_never_read_only() {
    let config = shop_web::WebConfig {
        write_grace: Duration::from_secs(1),
        ..shop_web::WebConfig::default()
    };
    let app = TestApp::builder().config(config).start().await;
    let lock = app.test_db.hold_write_lock_async().await;
    for _ in 0..3 {
        let (status, body, _) = health(&app).await;
        assert_eq!(
            (status, body["status"].as_str()),
            (StatusCode::OK, Some("degraded")),
            "{body}"
        );
    }
    lock.release();
    let (status, body, _) = health(&app).await;
    assert_eq!(
        (status, body["status"].as_str()),
        (StatusCode::OK, Some("ok"))
    );
}

/// Stale-if-error: with the database locked against reads (PostgreSQL: a table
/// lock held by another session) or gone (SQLite: the pool closed), item pages
/// whose cached copy expired are served from that copy (200, `X-Cache: STALE`);
/// a page that was never cached answers 503 at once.
#[tokio::test]
async fn expired_pages_are_served_stale_while_the_database_cannot_render_them() {
    use sqlx::Connection;
    let config = shop_web::WebConfig {
        page_ttl: Duration::from_secs(2),
        page_stale: shop_page_cache::StaleGrace {
            while_revalidate: Duration::ZERO,
            if_error: Duration::from_secs(600),
        },
        ..shop_web::WebConfig::default()
    };
    for app in TestApp::builder()
        .config(config)
        .start_on_every_database()
        .await
    {
        let kind = app.kind();
        app.rank(&[1, 2, 3, 4, 5]).await;
        let mut pages = Vec::new();
        for id in 1..=5 {
            let resp = app.get(&format!("/items/{id}"), None).await;
            assert_eq!(resp.headers()["x-cache"], "MISS", "{kind}");
            pages.push(shop_testapp::text(resp).await);
        }
        // The database stops answering reads.
        let mut lock = None;
        if kind == "postgres" {
            let mut conn = sqlx::PgConnection::connect(app.test_db.url())
                .await
                .unwrap();
            sqlx::query("BEGIN").execute(&mut conn).await.unwrap();
            sqlx::query("LOCK TABLE items IN ACCESS EXCLUSIVE MODE")
                .execute(&mut conn)
                .await
                .unwrap();
            lock = Some(conn);
        } else {
            app.db.close().await;
        }
        // Once expired, every one of them is still served, from its stale copy.
        let deadline = Instant::now() + Duration::from_secs(20);
        for (n, want) in pages.iter().enumerate() {
            let uri = format!("/items/{}", n + 1);
            loop {
                let resp = app.get(&uri, None).await;
                assert_eq!(resp.status(), StatusCode::OK, "{kind} {uri}");
                let label = resp.headers()["x-cache"].to_str().unwrap().to_owned();
                assert_eq!(&shop_testapp::text(resp).await, want, "{kind} {uri}");
                if label == "STALE" {
                    break;
                }
                assert_eq!(label, "HIT", "{kind} {uri}");
                assert!(Instant::now() < deadline, "{kind} {uri} never expired");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
        let never = app.get("/items/9", None).await;
        assert_eq!(never.status(), StatusCode::SERVICE_UNAVAILABLE, "{kind}");
        if let Some(conn) = lock {
            conn.close().await.unwrap();
        }
    }
}
