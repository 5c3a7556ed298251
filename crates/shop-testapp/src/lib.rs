//! The one test kit for app tests: [`TestApp`] is a whole shop for one test, on
//! its own `redis-server` and its own database (SQLite file, or PostgreSQL where
//! one answers), seeded, with the router over them. Web tests drive the router
//! without a socket ([`TestApp::get`], [`TestApp::post`], ...); binary tests run
//! the `shop` binary against the same Redis, database and working directory
//! ([`TestApp::command`]). Nothing is shared between tests and nothing is mocked.
//!
//! [`shop_testkit`] has the servers alone (`TestRedis`, `TestDb`, a cluster), for
//! tests of one layer; this crate is for tests of the application.

use std::ffi::OsStr;
use std::process::{Command, Stdio};
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

/// Items in a test shop's catalogue unless [`TestAppBuilder::items`] says; ids
/// above it are unknown items.
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

/// How a [`TestApp`] is made: its web settings, its Redis handle's waits, the size
/// and seed of its catalogue.
#[derive(Debug, Clone)]
pub struct TestAppBuilder {
    config: WebConfig,
    redis_budget: Duration,
    waits: RedisWaits,
    items: u64,
    catalogue_seed: u64,
    demo_users: bool,
}

impl TestAppBuilder {
    /// The router's settings (default: [`WebConfig::default`]).
    pub fn config(mut self, config: WebConfig) -> Self {
        self.config = config;
        self
    }

    /// How long one Redis command of a request may take (default:
    /// [`TEST_REDIS_BUDGET`], whatever the config says).
    pub fn redis_budget(mut self, budget: Duration) -> Self {
        self.redis_budget = budget;
        self
    }

    /// How long the router's Redis handle waits (default: [`RedisWaits::Quick`]).
    pub fn waits(mut self, waits: RedisWaits) -> Self {
        self.waits = waits;
        self
    }

    /// Items in the catalogue, ids `1..=items` (default: [`ITEMS`]).
    pub fn items(mut self, items: u64) -> Self {
        self.items = items;
        self
    }

    /// No demo accounts in the database (default: alice, bob and carol); with
    /// `items(0)`, a database as a new shop's is.
    pub fn without_users(mut self) -> Self {
        self.demo_users = false;
        self
    }

    /// The seed of the generated catalogue (default 1; `shop seed` uses
    /// [`shop_db::seed::DEFAULT_SEED`]).
    pub fn catalogue_seed(mut self, seed: u64) -> Self {
        self.catalogue_seed = seed;
        self
    }

    /// A shop on a new SQLite file.
    pub async fn start(self) -> TestApp {
        self.start_on(TestDb::sqlite()).await
    }

    /// A shop on `test_db` (SQLite or PostgreSQL).
    pub async fn start_on(mut self, test_db: TestDb) -> TestApp {
        self.config.redis_budget = self.redis_budget;
        let redis = TestRedis::start();
        let conn = match self.waits {
            RedisWaits::Quick => {
                let quick = ConnectionManagerConfig::new()
                    .set_response_timeout(Some(Duration::from_millis(300)))
                    .set_connection_timeout(Some(Duration::from_millis(200)))
                    .set_number_of_retries(1);
                shop_cache::connect_with(&redis.url(), quick).await
            }
            RedisWaits::Shop => shop_cache::connect(&redis.url()).await,
        }
        .expect("the test's redis-server answers");
        let db = Db::connect(test_db.url())
            .await
            .expect("the test's database opens");
        db.seed(self.items, self.catalogue_seed, &|_| {})
            .await
            .expect("the test's catalogue is seeded");
        if self.demo_users {
            db.add_demo_users()
                .await
                .expect("the test's demo users are added");
        }
        let keys = Keys::default();
        let state = AppState::new(db.clone(), conn.clone(), keys.clone(), self.config.clone());
        TestApp {
            router: shop_web::router(state.clone()),
            internal: shop_web::internal_router(state.clone()),
            state,
            redis,
            test_db,
            db,
            conn,
            keys,
            config: self.config,
            cwd: tempfile::tempdir().expect("a temporary directory"),
        }
    }

    /// One shop per database the machine offers: SQLite, and PostgreSQL where a
    /// server answers (see [`TestDb::all`]).
    pub async fn start_on_every_database(self) -> Vec<TestApp> {
        let mut apps = Vec::new();
        for test_db in TestDb::all().await {
            apps.push(self.clone().start_on(test_db).await);
        }
        apps
    }
}

/// A whole shop for one test: its Redis, its database, its router over both, and a
/// working directory for the binary. Dropping it stops its `redis-server` and
/// removes its database.
pub struct TestApp {
    /// The whole application.
    pub router: Router,
    /// What operators read (`/metrics`, the detailed `/healthz`), served on its
    /// own listener by `shop serve`.
    pub internal: Router,
    /// The router's state (the same parts the router uses).
    pub state: AppState,
    /// The database handle the router uses.
    pub db: Db,
    /// The Redis handle the router uses.
    pub conn: RedisConn,
    /// The key layout (the book's).
    pub keys: Keys,
    /// The router's settings.
    pub config: WebConfig,
    /// The binary's working directory (where its `data/` would go).
    pub cwd: tempfile::TempDir,
    /// Its database (to lock it from outside, or to hand its URL to the binary);
    /// dropped after the handles above.
    pub test_db: TestDb,
    /// Its redis-server (to look at what was stored, or to stop it).
    pub redis: TestRedis,
}

impl TestApp {
    /// A shop with the defaults: [`ITEMS`] items on SQLite, [`RedisWaits::Quick`].
    pub async fn start() -> Self {
        Self::builder().start().await
    }

    /// A shop with `config`, otherwise the defaults.
    pub async fn with_config(config: WebConfig) -> Self {
        Self::builder().config(config).start().await
    }

    /// A shop made as the builder says.
    pub fn builder() -> TestAppBuilder {
        TestAppBuilder {
            config: WebConfig::default(),
            redis_budget: TEST_REDIS_BUDGET,
            waits: RedisWaits::Quick,
            items: ITEMS,
            catalogue_seed: 1,
            demo_users: true,
        }
    }

    /// `program` (the `shop` binary: `env!("CARGO_BIN_EXE_shop")`) pointed at this
    /// shop's Redis, database and working directory, with no other setting
    /// leaking in from the environment.
    pub fn command(&self, program: impl AsRef<OsStr>) -> Command {
        let mut cmd = clean_command(program);
        cmd.current_dir(self.cwd.path())
            .env("REDIS_URL", self.redis.url())
            .env("DATABASE_URL", self.test_db.url());
        cmd
    }

    /// Another web server over the same Redis and database.
    pub fn second_server(&self) -> Router {
        shop_web::router(self.second_state())
    }

    /// The state of another web server over the same Redis and database (its own
    /// in-process page tier, view batch and held touches).
    pub fn second_state(&self) -> AppState {
        AppState::new(
            self.db.clone(),
            self.conn.clone(),
            self.keys.clone(),
            self.config.clone(),
        )
    }

    /// `sqlite` or `postgres`.
    pub fn kind(&self) -> &'static str {
        self.test_db.kind()
    }

    /// Puts `item` on a flash sale that began a minute ago and ends in an hour, in
    /// the database and in Redis (as `shop sale start` does, without caching its
    /// row).
    pub async fn start_sale(&self, item: u64, stock: i64, price_cents: i64) {
        let now = shop_db::unix_now();
        let sale = Sale {
            stock,
            price_cents,
            start: now - 60,
            end: now + 3_600,
        };
        let item = ItemId::new(item).expect("a valid item id");
        assert!(
            self.db.set_sale(item, sale, now).await.unwrap().is_set(),
            "no {item:?}"
        );
        let terms = shop_cache::flash_sale::SaleTerms {
            stock,
            price_cents,
            start: sale.start,
            end: sale.end,
        };
        self.state.flash.open(item, &terms, now).await.unwrap();
    }

    /// One request through the router.
    pub async fn send(&self, req: Request<Body>) -> Response {
        send(&self.router, req).await
    }

    /// A GET to the operators' router ([`TestApp::internal`]).
    pub async fn internal_get(&self, uri: &str) -> Response {
        send(
            &self.internal,
            Request::get(uri).body(Body::empty()).unwrap(),
        )
        .await
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

    /// The `cart_version` the cart page shows the session `cookie` now: what its
    /// checkout form confirms.
    pub async fn cart_version(&self, cookie: &str) -> String {
        let page = text(self.get("/cart", Some(cookie)).await).await;
        cart_version_in(&page).expect("the cart page has a checkout form")
    }

    /// A checkout's form as the cart page shown now posts it: `key` and the
    /// page's `cart_version`.
    pub async fn checkout_form(&self, cookie: &str, key: &str) -> String {
        let version = self.cart_version(cookie).await;
        format!("key={key}&cart_version={version}")
    }

    /// How many times Redis has run each command so far (`INFO commandstats`), by
    /// its lowercase name.
    pub async fn command_calls(&self) -> std::collections::BTreeMap<String, u64> {
        let info: String = redis::cmd("INFO")
            .arg("commandstats")
            .query_async(&mut self.redis.conn().await)
            .await
            .unwrap();
        info.lines()
            .filter_map(|line| {
                let (name, rest) = line.strip_prefix("cmdstat_")?.split_once(":calls=")?;
                let calls = rest.split(',').next()?.parse().ok()?;
                Some((name.to_owned(), calls))
            })
            .collect()
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

    /// Makes `items` rank among the most viewed (a hundred views each in
    /// `viewed:`), so their pages and insights are cached.
    pub async fn rank(&self, items: &[u64]) {
        let mut conn = self.redis.conn().await;
        for id in items {
            let _: () = redis::cmd("ZADD")
                .arg(self.keys.item_views())
                .arg(-100)
                .arg(id)
                .query_async(&mut conn)
                .await
                .unwrap();
        }
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

/// Runs `state`'s in-process tier feed (how a web server hears the other servers'
/// purges) until `stop` is cancelled; returns once the tier is subscribed.
pub async fn run_tier_feed(state: &AppState, stop: &tokio_util::sync::CancellationToken) {
    let feed = state.tier_feed().expect("a tier by default");
    tokio::spawn(shop_cache::daemon::run(feed, stop.clone()));
    let tier = state.tier.clone().expect("a tier by default");
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !tier.is_trusted() {
        assert!(
            std::time::Instant::now() < deadline,
            "the tier never subscribed"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// The `cart_version` in a cart page's checkout form, if `page` has one.
pub fn cart_version_in(page: &str) -> Option<String> {
    let (_, rest) = page.split_once("name=\"cart_version\" value=\"")?;
    Some(rest.split('"').next()?.to_owned())
}

/// How long one Redis command of a request may take in tests (the shop's default
/// is 100 ms): the tests share two cores with each other, and a command held up
/// that long by the machine, not by Redis, would fail a request that the test is
/// not about. The stall drills set the shop's own budget.
pub const TEST_REDIS_BUDGET: Duration = Duration::from_secs(1);

/// `program` (the `shop` binary) with no shop setting from the environment
/// (`SHOP_*`, `REDIS_URL`, `DATABASE_URL`) but the tests' Redis budget
/// ([`TEST_REDIS_BUDGET`], which a flag overrides), no input, and its output piped.
pub fn clean_command(program: impl AsRef<OsStr>) -> Command {
    let mut cmd = Command::new(program);
    for (name, _) in std::env::vars() {
        if name.starts_with("SHOP_") || name == "REDIS_URL" || name == "DATABASE_URL" {
            cmd.env_remove(name);
        }
    }
    cmd.env(
        "SHOP_REDIS_BUDGET_MS",
        TEST_REDIS_BUDGET.as_millis().to_string(),
    );
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cmd
}

/// A plain GET of `uri`, to send to a router with [`send`].
pub fn get_request(uri: &str) -> Request<Body> {
    Request::get(uri).body(Body::empty()).expect("a valid URI")
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
        .find(|v| v.starts_with("shop_session=") || v.starts_with("__Host-shop_session="))
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
