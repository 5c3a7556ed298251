//! What the web tier's tests share: a shop on its own redis-server and SQLite file,
//! driven through its router without a socket, and readers of its answers.

use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::http::{Request, StatusCode, header, request};
use axum::response::Response;
use http_body_util::BodyExt;
use redis::aio::ConnectionManagerConfig;
use shop_cache::RedisConn;
use shop_cache::domain::ItemId;
use shop_cache::keys::Keys;
use shop_db::Db;
use shop_db::inventory::Sale;
use shop_testkit::{TestDb, TestRedis};
use shop_web::{AppState, WebConfig};
use tower::ServiceExt;

/// Items in every test shop's catalogue; ids above it are unknown items.
pub const ITEMS: u64 = 30;

/// The password of the users the tests create.
pub const PASSWORD: &str = "secret-pw";

/// How long the shop's Redis handle waits for an answer.
#[derive(Debug, Clone, Copy)]
pub enum RedisWaits {
    /// Tenths of a second and one retry: a stopped Redis is noticed at once.
    Quick,
    /// The shop's own timeouts ([`shop_cache::connect`]): for tests that keep Redis
    /// up and must not take a slow answer under load for an outage.
    Shop,
}

/// The shop's router over its own Redis and SQLite file, seeded with [`ITEMS`] items.
pub struct App {
    /// Its redis-server (to look at what was stored, or to stop it).
    pub redis: TestRedis,
    /// Its database file (to lock it from outside).
    pub test_db: TestDb,
    /// The database handle the router uses.
    pub db: Db,
    /// The Redis handle the router uses.
    pub conn: RedisConn,
    /// The whole application.
    pub router: Router,
    /// Its state (the same parts the router uses).
    pub state: AppState,
}

/// A shop with the default settings.
pub async fn app() -> App {
    app_with(WebConfig::default()).await
}

/// A shop with `config`.
pub async fn app_with(config: WebConfig) -> App {
    App::start(RedisWaits::Quick, config).await
}

impl App {
    /// A shop whose Redis handle waits as `waits` says.
    pub async fn start(waits: RedisWaits, config: WebConfig) -> Self {
        let redis = TestRedis::start();
        let conn = match waits {
            RedisWaits::Quick => {
                let quick = ConnectionManagerConfig::new()
                    .set_response_timeout(Some(Duration::from_millis(300)))
                    .set_connection_timeout(Some(Duration::from_millis(200)))
                    .set_number_of_retries(1);
                shop_cache::connect_with(&redis.url(), quick).await
            }
            RedisWaits::Shop => shop_cache::connect(&redis.url()).await,
        }
        .unwrap();
        let test_db = TestDb::sqlite();
        let db = Db::connect(test_db.url()).await.unwrap();
        db.seed(ITEMS, 1, &|_| {}).await.unwrap();
        let state = AppState::new(db.clone(), conn.clone(), Keys::default(), config);
        Self {
            redis,
            test_db,
            db,
            conn,
            router: shop_web::router(state.clone()),
            state,
        }
    }

    /// Puts `item` on a flash sale that began a minute ago and ends in an hour, in
    /// the database and in Redis (as `shop sale start` does).
    pub async fn start_sale(&self, item: u64, stock: i64, price_cents: i64) {
        let now = shop_db::unix_now();
        let sale = Sale {
            stock,
            price_cents,
            start: now - 60,
            end: now + 3_600,
        };
        let item = ItemId::new(item).unwrap();
        assert!(self.db.set_sale(item, sale).await.unwrap(), "no {item:?}");
        // And in Redis, where buys are decided.
        let terms = shop_cache::flash_sale::SaleTerms {
            stock,
            price_cents,
            start: sale.start,
            end: sale.end,
        };
        shop_cache::flash_sale::FlashSales::new(self.conn.clone(), Keys::default())
            .open(item, &terms)
            .await
            .unwrap();
    }

    /// One request through the router.
    pub async fn send(&self, req: Request<Body>) -> Response {
        send(&self.router, req).await
    }

    /// A GET, with `cookie` if any.
    pub async fn get(&self, uri: &str, cookie: Option<&str>) -> Response {
        let mut req = Request::get(uri);
        if let Some(c) = cookie {
            req = req.header(header::COOKIE, c);
        }
        self.send(req.body(Body::empty()).unwrap()).await
    }

    /// A form posted as a page posts it; `json`: as its script does, asking for JSON.
    pub async fn post(&self, uri: &str, cookie: Option<&str>, form: &str, json: bool) -> Response {
        let req = form_post(uri, cookie, json).body(Body::from(form.to_owned()));
        self.send(req.unwrap()).await
    }

    /// `/api/me`: the session's user and cart.
    pub async fn me(&self, cookie: &str) -> serde_json::Value {
        json(self.get("/api/me", Some(cookie)).await).await
    }

    /// Writes the item views counted so far (the view flusher's step), as a
    /// serving process does every tenth of a second.
    pub async fn flush_views(&self) {
        self.state.sessions.flush_views().await.unwrap();
    }

    /// A new visitor's cookie, as the shop issues it.
    pub async fn visitor(&self) -> String {
        let resp = self.get("/", None).await;
        cookie_of(&resp).expect("a new visitor gets a cookie")
    }

    /// A new visitor's cookie once logged in as `name` (with [`PASSWORD`]).
    pub async fn log_in(&self, name: &str) -> String {
        let guest = self.visitor().await;
        let form = format!("name={name}&password={PASSWORD}");
        let resp = self.post("/login", Some(&guest), &form, false).await;
        assert_eq!(resp.status(), StatusCode::SEE_OTHER, "login of {name}");
        cookie_of(&resp).expect("login issues a new cookie")
    }

    /// A cookie logged in as a new user `name`.
    pub async fn logged_in(&self, name: &str) -> String {
        self.db.create_user(name, PASSWORD).await.unwrap().unwrap();
        self.log_in(name).await
    }
}

/// One request through `router`, as a connection would send it.
pub async fn send(router: &Router, req: Request<Body>) -> Response {
    router.clone().oneshot(req).await.unwrap()
}

/// The head of a form POST: `cookie` if any, and JSON asked for if `json`.
pub fn form_post(uri: &str, cookie: Option<&str>, json: bool) -> request::Builder {
    let mut req =
        Request::post(uri).header(header::CONTENT_TYPE, "application/x-www-form-urlencoded");
    if let Some(c) = cookie {
        req = req.header(header::COOKIE, c);
    }
    if json {
        req = req.header(header::ACCEPT, "application/json");
    }
    req
}

/// The `name=value` of the session cookie a response sets.
pub fn cookie_of(resp: &Response) -> Option<String> {
    resp.headers()
        .get_all(header::SET_COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .find(|v| v.starts_with("shop_session="))
        .map(|v| v.split(';').next().unwrap().to_owned())
}

/// The body, as UTF-8 text.
pub async fn text(resp: Response) -> String {
    let bytes = resp.into_body().collect().await.unwrap().to_bytes();
    String::from_utf8(bytes.to_vec()).unwrap()
}

/// The body, as JSON.
pub async fn json(resp: Response) -> serde_json::Value {
    let body = text(resp).await;
    serde_json::from_str(&body).unwrap_or_else(|_| panic!("not JSON: {body}"))
}
