//! The database failing under the web tier: a write lock held by another process
//! (SQLite), a closed pool. Writes answer 503 with `Retry-After` within seconds,
//! reads and logins keep working, and `/healthz` says which.

use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use axum::response::Response;
use http_body_util::BodyExt;
use shop_cache::keys::Keys;
use shop_db::Db;
use shop_db::inventory::Sale;
use shop_testkit::{TestDb, TestRedis};
use shop_web::{AppState, WebConfig};
use sqlx::Connection;
use tower::ServiceExt;

struct App {
    _redis: TestRedis,
    test_db: TestDb,
    db: Db,
    app: Router,
}

/// A shop on its own Redis and SQLite file: 30 items, item 1 on sale now.
async fn app() -> App {
    let redis = TestRedis::start();
    let quick = redis::aio::ConnectionManagerConfig::new()
        .set_response_timeout(Some(Duration::from_millis(300)))
        .set_connection_timeout(Some(Duration::from_millis(200)))
        .set_number_of_retries(1);
    let conn = shop_cache::connect_with(&redis.url(), quick).await.unwrap();
    let test_db = TestDb::sqlite();
    let db = Db::connect(test_db.url()).await.unwrap();
    db.seed(30, 1, &|_| {}).await.unwrap();
    let now = shop_db::unix_now();
    let sale = Sale {
        stock: 10,
        price_cents: 999,
        start: now - 60,
        end: now + 3_600,
    };
    assert!(
        db.set_sale(shop_cache::domain::ItemId::new(1).unwrap(), sale)
            .await
            .unwrap()
    );
    let state = AppState::new(db.clone(), conn, Keys::default(), WebConfig::default());
    App {
        _redis: redis,
        test_db,
        db,
        app: shop_web::router(state),
    }
}

impl App {
    async fn send(&self, req: Request<Body>) -> Response {
        self.app.clone().oneshot(req).await.unwrap()
    }

    async fn get(&self, uri: &str, cookie: Option<&str>) -> Response {
        let mut req = Request::get(uri);
        if let Some(c) = cookie {
            req = req.header(header::COOKIE, c);
        }
        self.send(req.body(Body::empty()).unwrap()).await
    }

    async fn post(&self, uri: &str, cookie: &str, form: &str, json: bool) -> Response {
        let mut req = Request::post(uri)
            .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
            .header(header::COOKIE, cookie)
            .header("idempotency-key", format!("key-{}", form.len()));
        if json {
            req = req.header(header::ACCEPT, "application/json");
        }
        self.send(req.body(Body::from(form.to_owned())).unwrap())
            .await
    }

    /// A cookie logged in as `name` (created before any fault).
    async fn logged_in(&self, name: &str) -> String {
        let guest = cookie_of(&self.get("/", None).await).expect("a visitor cookie");
        let resp = self
            .post(
                "/login",
                &guest,
                &format!("name={name}&password=secret-pw"),
                false,
            )
            .await;
        assert_eq!(resp.status(), StatusCode::SEE_OTHER, "login of {name}");
        cookie_of(&resp).expect("login issues a new cookie")
    }

    /// `/healthz`: its status, its body, and how long it took.
    async fn health(&self) -> (StatusCode, serde_json::Value, Duration) {
        let started = Instant::now();
        let resp = self.get("/healthz", None).await;
        let took = started.elapsed();
        let status = resp.status();
        if status == StatusCode::SERVICE_UNAVAILABLE {
            retry_after(&resp);
        }
        (status, json(resp).await, took)
    }

    /// Another process's connection to the same file, holding SQLite's write lock
    /// until it is rolled back.
    async fn hold_write_lock(&self) -> sqlx::SqliteConnection {
        let path = self.test_db.url().strip_prefix("sqlite:").unwrap();
        let mut other = sqlx::SqliteConnection::connect_with(
            &sqlx::sqlite::SqliteConnectOptions::new().filename(path),
        )
        .await
        .unwrap();
        sqlx::query("BEGIN IMMEDIATE")
            .execute(&mut other)
            .await
            .unwrap();
        other
    }
}

/// The `name=value` of the session cookie a response sets.
fn cookie_of(resp: &Response) -> Option<String> {
    resp.headers()
        .get_all(header::SET_COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .find(|v| v.starts_with("shop_session="))
        .map(|v| v.split(';').next().unwrap().to_owned())
}

async fn json(resp: Response) -> serde_json::Value {
    let bytes = resp.into_body().collect().await.unwrap().to_bytes();
    serde_json::from_slice(&bytes)
        .unwrap_or_else(|_| panic!("not JSON: {}", String::from_utf8_lossy(&bytes)))
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
        app.db
            .create_user(name, "secret-pw")
            .await
            .unwrap()
            .unwrap();
    }
    let lou = app.logged_in("lou").await;
    let add = app.post("/cart", &lou, "item=2&count=1", true).await;
    assert_eq!(add.status(), StatusCode::OK);
    let (status, body, _) = app.health().await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body, serde_json::json!({"redis": true, "database": "ok"}));

    let mut other = app.hold_write_lock().await;

    let (status, body, took) = app.health().await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    assert_eq!(
        body,
        serde_json::json!({"redis": true, "database": "degraded"})
    );
    assert!(
        took < Duration::from_millis(1_500),
        "/healthz took {took:?}"
    );

    // Writes: 503 with Retry-After within seconds, as JSON and as a page.
    let started = Instant::now();
    let resp = app.post("/checkout", &lou, "key=k1", true).await;
    unavailable_fast("checkout", &resp, started.elapsed());
    assert_eq!(json(resp).await["error"], "unavailable");
    let started = Instant::now();
    let resp = app.post("/api/flash/1/buy", &lou, "", true).await;
    unavailable_fast("flash purchase", &resp, started.elapsed());
    let started = Instant::now();
    let resp = app.post("/checkout", &lou, "key=k2", false).await;
    unavailable_fast("checkout form", &resp, started.elapsed());

    // Reads: pages and logins answer at once, 20 at a time.
    let reads = (0..20).map(|i| {
        let app = app.app.clone();
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
    app.logged_in("max").await;
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "a login reads only"
    );

    // The lock goes: healthy again, and the same checkout goes through.
    sqlx::query("ROLLBACK").execute(&mut other).await.unwrap();
    let (status, body, _) = app.health().await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["database"], "ok");
    let resp = app.post("/checkout", &lou, "key=k1", true).await;
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(json(resp).await["outcome"], "placed");
}

#[tokio::test]
async fn a_database_that_answers_nothing_is_down() {
    let app = app().await;
    app.db.close().await;
    let (status, body, took) = app.health().await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(body, serde_json::json!({"redis": true, "database": "down"}));
    assert!(
        took < Duration::from_millis(1_500),
        "/healthz took {took:?}"
    );
    let resp = app.get("/items/3", None).await;
    assert_eq!(resp.status(), StatusCode::SERVICE_UNAVAILABLE);
    retry_after(&resp);
}
