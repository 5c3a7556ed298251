//! The flash sale over HTTP, through the router (no socket).

use axum::Router;
use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use axum::response::Response;
use http_body_util::BodyExt;
use shop_cache::domain::ItemId;
use shop_cache::keys::Keys;
use shop_cache::row_cache::{RefreshStep, Refresher};
use shop_cache::session::SessionToken;
use shop_db::Db;
use shop_db::inventory::Sale;
use shop_testkit::{TestDb, TestRedis};
use shop_web::{AppState, WebConfig};
use tower::ServiceExt;

struct Shop {
    _redis: TestRedis,
    _db_dir: TestDb,
    db: Db,
    conn: shop_cache::RedisConn,
    state: AppState,
    app: Router,
}

impl Shop {
    async fn start() -> Self {
        let redis = TestRedis::start();
        let conn = shop_cache::connect(&redis.url()).await.unwrap();
        let test_db = TestDb::sqlite();
        let db = Db::connect(test_db.url()).await.unwrap();
        db.seed(10, 1, &|_| {}).await.unwrap();
        let state = AppState::new(
            db.clone(),
            conn.clone(),
            Keys::default(),
            WebConfig::default(),
        );
        let app = shop_web::router(state.clone());
        Self {
            _redis: redis,
            _db_dir: test_db,
            db,
            conn,
            state,
            app,
        }
    }

    /// Puts item 1 on sale now with `stock` units and refreshes its cached row once.
    async fn sale(&self, stock: i64) {
        self.sale_of(1, stock).await;
    }

    /// Puts item `n` on sale now with `stock` units and refreshes its cached row once.
    async fn sale_of(&self, n: u64, stock: i64) {
        let now = shop_db::unix_now();
        let sale = Sale {
            stock,
            price_cents: 500,
            start: now - 60,
            end: now + 3_600,
        };
        let (rows, pages) = (&self.state.rows, &self.state.pages);
        let started = shop::sale::start(&self.db, rows, pages, item(n), sale, 1.0);
        assert!(started.await.unwrap());
        self.refresh().await;
    }

    async fn refresh(&self) {
        let refresher = Refresher::new(
            self.conn.clone(),
            Keys::default(),
            shop::row_source(self.db.clone()),
        );
        while !matches!(refresher.step().await.unwrap(), RefreshStep::Idle(_)) {}
    }

    /// A logged-in session's cookie.
    async fn login(&self, name: &str) -> String {
        let user = self.db.create_user(name, "pw").await.unwrap().unwrap();
        let token = self
            .state
            .sessions
            .login(&SessionToken::generate(), user, None)
            .await
            .unwrap();
        format!("shop_session={}", token.expose())
    }

    async fn send(&self, req: Request<Body>) -> Response {
        self.app.clone().oneshot(req).await.unwrap()
    }

    async fn buy(
        &self,
        id: &str,
        cookie: Option<&str>,
        key: Option<&str>,
    ) -> (StatusCode, serde_json::Value) {
        let mut req = Request::post(format!("/api/flash/{id}/buy"));
        if let Some(cookie) = cookie {
            req = req.header(header::COOKIE, cookie);
        }
        if let Some(key) = key {
            req = req.header("idempotency-key", key);
        }
        let resp = self.send(req.body(Body::empty()).unwrap()).await;
        let status = resp.status();
        (status, json(resp).await)
    }
}

fn item(n: u64) -> ItemId {
    ItemId::new(n).unwrap()
}

async fn html_of(resp: Response) -> String {
    let bytes = resp.into_body().collect().await.unwrap().to_bytes();
    String::from_utf8(bytes.to_vec()).unwrap()
}

async fn json(resp: Response) -> serde_json::Value {
    let bytes = resp.into_body().collect().await.unwrap().to_bytes();
    serde_json::from_slice(&bytes)
        .unwrap_or_else(|_| panic!("not JSON: {}", String::from_utf8_lossy(&bytes)))
}

#[tokio::test]
async fn inventory_answers_from_the_row_cache_alone() {
    let shop = Shop::start().await;
    let get = |uri: &str| Request::get(uri.to_owned()).body(Body::empty()).unwrap();
    let bad = shop.send(get("/api/inventory/abc")).await;
    assert_eq!(bad.status(), StatusCode::BAD_REQUEST);
    assert_eq!(json(bad).await["error"], "bad_request");
    let unscheduled = shop.send(get("/api/inventory/2")).await;
    assert_eq!(unscheduled.status(), StatusCode::NOT_FOUND);
    assert_eq!(
        shop.send(get("/api/inventory/999")).await.status(),
        StatusCode::NOT_FOUND
    );

    shop.sale(20).await;
    // The database is gone: the endpoint still answers, so it never asked it.
    shop.db.close().await;
    let ok = shop.send(get("/api/inventory/1")).await;
    assert_eq!(ok.status(), StatusCode::OK);
    assert_eq!(ok.headers()[header::CONTENT_TYPE], "application/json");
    let row = json(ok).await;
    assert_eq!(row["item_id"], 1);
    assert_eq!(row["stock"], 20);
    assert_eq!(row["sale_price_cents"], 500);
    assert!(row["sale_end"].as_i64().unwrap() > row["sale_start"].as_i64().unwrap());
}

#[tokio::test]
async fn buying_needs_a_key_and_a_login_and_is_idempotent() {
    let shop = Shop::start().await;
    shop.sale(2).await;
    let alice = shop.login("alice2").await;
    let bob = shop.login("bob2").await;
    let carol = shop.login("carol2").await;

    let (status, body) = shop.buy("1", Some(&alice), None).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    let (status, _) = shop.buy("1", Some(&alice), Some(&"k".repeat(101))).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    let (status, body) = shop.buy("1", None, Some("k1")).await;
    assert_eq!(
        (status, body["error"].as_str()),
        (StatusCode::UNAUTHORIZED, Some("login_required"))
    );
    let forged = format!("shop_session={}", SessionToken::generate().expose());
    assert_eq!(
        shop.buy("1", Some(&forged), Some("k1")).await.0,
        StatusCode::UNAUTHORIZED
    );
    assert_eq!(
        shop.buy("x", Some(&alice), Some("k1")).await.0,
        StatusCode::BAD_REQUEST
    );

    let (status, first) = shop.buy("1", Some(&alice), Some("k1")).await;
    assert_eq!(status, StatusCode::OK, "{first}");
    assert_eq!(first["outcome"], "bought");
    let (status, again) = shop.buy("1", Some(&alice), Some("k1")).await;
    assert_eq!(
        (status, &again),
        (StatusCode::OK, &first),
        "a retry gets the same answer"
    );
    let (status, limit) = shop.buy("1", Some(&alice), Some("k2")).await;
    assert_eq!(
        (status, limit["outcome"].as_str()),
        (StatusCode::CONFLICT, Some("limit_reached"))
    );

    assert_eq!(
        shop.buy("1", Some(&bob), Some("b1")).await.0,
        StatusCode::OK
    );
    let (status, sold_out) = shop.buy("1", Some(&carol), Some("c1")).await;
    assert_eq!(
        (status, sold_out["outcome"].as_str()),
        (StatusCode::CONFLICT, Some("sold_out"))
    );
    let (status, _) = shop.buy("2", Some(&carol), Some("c2")).await;
    assert_eq!(status, StatusCode::CONFLICT, "item 2 is not on sale");
    let (status, unknown) = shop.buy("999", Some(&carol), Some("c3")).await;
    assert_eq!(
        (status, unknown["outcome"].as_str()),
        (StatusCode::NOT_FOUND, Some("unknown_item"))
    );

    assert_eq!(shop.db.units_ordered(item(1)).await.unwrap(), 2);
    // The shown stock follows within the row's one-second refresh.
    let started = std::time::Instant::now();
    loop {
        shop.refresh().await;
        let cached = shop.state.rows.get(item(1)).await.unwrap().unwrap();
        let row: serde_json::Value = serde_json::from_str(&cached).unwrap();
        if row["stock"] == 0 {
            break;
        }
        assert!(
            started.elapsed().as_secs() < 3,
            "stock not refreshed: {row}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn the_sale_page_is_one_shared_cached_shell() {
    let shop = Shop::start().await;
    shop.sale(5).await;
    let page = |cookie: Option<String>| {
        let mut req = Request::get("/flash");
        if let Some(c) = cookie {
            req = req.header(header::COOKIE, c);
        }
        req.body(Body::empty()).unwrap()
    };
    let first = shop.send(page(None)).await;
    assert_eq!(first.status(), StatusCode::OK);
    assert_eq!(first.headers()["x-cache"], "MISS");
    let html = html_of(first).await;
    assert!(html.contains("data-item=\"1\""), "{html}");
    assert!(!html.contains("data-item=\"2\""), "only sale items");
    assert!(
        html.contains("/static/flash.js"),
        "stock comes from the script"
    );

    let cookie = shop.login("dave2").await;
    let second = shop.send(page(Some(cookie))).await;
    assert_eq!(
        second.headers()["x-cache"],
        "HIT",
        "the same page for a logged-in visitor"
    );
    let again = html_of(second).await;
    assert_eq!(again, html);

    // A sale started later shows at once: starting it drops the cached page.
    shop.sale_of(2, 3).await;
    let third = shop.send(page(None)).await;
    assert_eq!(third.headers()["x-cache"], "MISS");
    let html = html_of(third).await;
    assert!(html.contains("data-item=\"2\""), "{html}");
}
