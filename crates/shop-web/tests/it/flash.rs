//! The flash sale over HTTP, through the router (no socket), on SQLite and
//! PostgreSQL: exact counts under contention, idempotent retries across web
//! servers, the window and the per-user limit, and the reconciler after a server
//! died mid-buy. The killed process and the pages' live stock are in `e2e_flash`.

use std::collections::HashMap;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use axum::response::Response;
use http_body_util::BodyExt;
use shop_app::sale::{DbLedger, SaleStores};
use shop_cache::domain::{ItemId, UserId};
use shop_cache::flash_sale::{Reconciled, Reconciler, Reserve, Settlement};
use shop_cache::keys::Keys;
use shop_cache::row_cache::{RefreshStep, Refresher};
use shop_cache::session::SessionToken;
use shop_db::catalogue::RetiredInImport;
use shop_db::flash::WinRecord;
use shop_db::inventory::Sale;
use shop_testapp::{RedisWaits, TestApp, TestAppBuilder};
use shop_testkit::TestDb;
use shop_web::WebConfig;
use shop_web::flash::FlashDecider;
use tower::ServiceExt;

fn builder(config: WebConfig) -> TestAppBuilder {
    TestApp::builder()
        .config(config)
        .items(10)
        .waits(RedisWaits::Shop)
}

/// A [`TestApp`] of ten items, with the sale's helpers below.
pub struct Shop(TestApp);

impl std::ops::Deref for Shop {
    type Target = TestApp;

    fn deref(&self) -> &TestApp {
        &self.0
    }
}

impl Shop {
    async fn start(test_db: TestDb, config: WebConfig) -> Self {
        Self(builder(config).start_on(test_db).await)
    }

    /// One shop per database (SQLite, and PostgreSQL where it answers).
    async fn on_every_database(config: WebConfig) -> Vec<Self> {
        let apps = builder(config).start_on_every_database().await;
        apps.into_iter().map(Self).collect()
    }

    /// Puts item `n` on sale now with `stock` units and refreshes its cached row once.
    async fn sale_of(&self, n: u64, stock: i64) {
        let now = shop_db::unix_now();
        self.sale_with(
            n,
            Sale {
                stock,
                price_cents: 500,
                start: now - 60,
                end: now + 3_600,
            },
        )
        .await;
    }

    async fn sale_with(&self, n: u64, sale: Sale) {
        let stores = SaleStores {
            db: &self.db,
            flash: &self.state.flash,
            rows: &self.state.rows,
            pages: &self.state.pages,
        };
        assert!(
            shop_app::sale::start(&stores, item(n), sale, 1.0)
                .await
                .unwrap()
                .is_set()
        );
        self.refresh().await;
    }

    async fn refresh(&self) {
        let refresher = Refresher::new(
            self.conn.clone(),
            Keys::default(),
            shop_app::rows::row_source(self.db.clone()),
        );
        while !matches!(refresher.step().await.unwrap(), RefreshStep::Idle(_)) {}
    }

    fn reconciler(&self) -> Reconciler<DbLedger> {
        Reconciler::new(self.state.flash.clone(), DbLedger(self.db.clone()))
    }

    /// A logged-in session's cookie for a new user `name`.
    async fn login(&self, name: &str) -> String {
        let user = self.db.create_user(name, "pw").await.unwrap().unwrap();
        self.cookie_of(user).await
    }

    /// `n` new users (one password hash for all), logged in: (id, cookie) each.
    async fn buyers(&self, prefix: &str, n: usize) -> Vec<(UserId, String)> {
        let names: Vec<String> = (0..n).map(|i| format!("{prefix}{i}")).collect();
        let ids = self
            .db
            .create_users_sharing_password(&names, "buyer-password")
            .await
            .unwrap();
        let mut out = Vec::new();
        for id in ids {
            out.push((id, self.cookie_of(id).await));
        }
        out
    }

    async fn cookie_of(&self, user: UserId) -> String {
        let token = self
            .state
            .sessions
            .login(&SessionToken::generate(), user, None)
            .await
            .unwrap();
        format!("shop_session={}", token.expose())
    }

    async fn send(&self, req: Request<Body>) -> Response {
        send(&self.router, req).await
    }

    async fn buy(
        &self,
        id: &str,
        cookie: Option<&str>,
        key: Option<&str>,
    ) -> (StatusCode, serde_json::Value) {
        buy_on(&self.router, id, cookie, key).await
    }

    /// Redis's stock of item `n`'s sale.
    async fn redis_stock(&self, n: u64) -> i64 {
        self.state
            .flash
            .state(item(n))
            .await
            .unwrap()
            .unwrap()
            .stock
    }

    /// The database's stock of item `n`.
    async fn db_stock(&self, n: u64) -> i64 {
        self.db.inventory_row(item(n)).await.unwrap().unwrap().stock
    }

    /// Attempts the database recorded (winners only, when Redis decides).
    async fn recorded_attempts(&self) -> i64 {
        sqlx::query_scalar("SELECT COUNT(*) FROM flash_attempts")
            .fetch_one(self.db.pool())
            .await
            .unwrap()
    }
}

async fn send(app: &Router, req: Request<Body>) -> Response {
    app.clone().oneshot(req).await.unwrap()
}

async fn buy_on(
    app: &Router,
    id: &str,
    cookie: Option<&str>,
    key: Option<&str>,
) -> (StatusCode, serde_json::Value) {
    buy_at(app, &format!("/api/flash/{id}/buy"), cookie, key).await
}

/// A buy POSTed to `uri` (its query, if any, included).
async fn buy_at(
    app: &Router,
    uri: &str,
    cookie: Option<&str>,
    key: Option<&str>,
) -> (StatusCode, serde_json::Value) {
    let mut req = Request::post(uri);
    if let Some(cookie) = cookie {
        req = req.header(header::COOKIE, cookie);
    }
    if let Some(key) = key {
        req = req.header("idempotency-key", key);
    }
    let resp = send(app, req.body(Body::empty()).unwrap()).await;
    let status = resp.status();
    (status, json(resp).await)
}

fn item(n: u64) -> ItemId {
    ItemId::new(n).unwrap()
}

/// A reserved unit is held one second for its order (then the reconciler settles it).
fn short_hold() -> WebConfig {
    WebConfig {
        flash_hold: Duration::from_secs(1),
        ..WebConfig::default()
    }
}

fn config(decider: FlashDecider) -> WebConfig {
    WebConfig {
        flash_decider: decider,
        ..WebConfig::default()
    }
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

fn get(uri: &str) -> Request<Body> {
    Request::get(uri.to_owned()).body(Body::empty()).unwrap()
}

#[tokio::test]
async fn inventory_and_sale_state_answer_from_redis_alone() {
    let shop = Shop::start(TestDb::sqlite(), WebConfig::default()).await;
    for path in ["/api/inventory/abc", "/api/flash/abc", "/api/flash/0"] {
        let bad = shop.send(get(path)).await;
        assert_eq!(bad.status(), StatusCode::BAD_REQUEST, "{path}");
        assert_eq!(json(bad).await["error"], "bad_request");
    }
    for path in ["/api/inventory/2", "/api/inventory/999", "/api/flash/2"] {
        assert_eq!(shop.send(get(path)).await.status(), StatusCode::NOT_FOUND);
    }

    shop.sale_of(1, 20).await;
    // The database is gone: both still answer, so they never asked it.
    shop.db.close().await;
    let ok = shop.send(get("/api/inventory/1")).await;
    assert_eq!(ok.status(), StatusCode::OK);
    assert_eq!(ok.headers()[header::CONTENT_TYPE], "application/json");
    let row = json(ok).await;
    assert_eq!(
        (row["item_id"].as_i64(), row["stock"].as_i64()),
        (Some(1), Some(20))
    );
    let sale = json(shop.send(get("/api/flash/1")).await).await;
    assert_eq!(sale["stock"], 20);
    assert_eq!(sale["price_cents"], 500);
    assert!(sale["end"].as_i64().unwrap() > sale["start"].as_i64().unwrap());
}

#[tokio::test]
async fn buying_needs_a_key_and_a_login_and_is_idempotent() {
    for decider in [FlashDecider::Redis, FlashDecider::Database] {
        for shop in Shop::on_every_database(config(decider)).await {
            let kind = (shop.kind(), decider);
            shop.sale_of(1, 2).await;
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
            let (status, _) = shop.buy("1", Some(&forged), Some("k1")).await;
            assert_eq!(status, StatusCode::UNAUTHORIZED);
            let (status, _) = shop.buy("x", Some(&alice), Some("k1")).await;
            assert_eq!(status, StatusCode::BAD_REQUEST);

            let (status, first) = shop.buy("1", Some(&alice), Some("k1")).await;
            assert_eq!(status, StatusCode::OK, "{kind:?} {first}");
            assert_eq!(first["outcome"], "bought");
            let again = shop.buy("1", Some(&alice), Some("k1")).await;
            assert_eq!(
                again,
                (StatusCode::OK, first.clone()),
                "{kind:?}: same answer"
            );
            let (status, limit) = shop.buy("1", Some(&alice), Some("k2")).await;
            assert_eq!(
                (status, limit["outcome"].as_str()),
                (StatusCode::CONFLICT, Some("limit_reached")),
                "{kind:?}"
            );
            assert_eq!(
                shop.buy("1", Some(&bob), Some("b1")).await.0,
                StatusCode::OK
            );
            let (status, sold_out) = shop.buy("1", Some(&carol), Some("c1")).await;
            assert_eq!(
                (status, sold_out["outcome"].as_str()),
                (StatusCode::CONFLICT, Some("sold_out")),
                "{kind:?}"
            );
            let (status, _) = shop.buy("2", Some(&carol), Some("c2")).await;
            assert_eq!(status, StatusCode::CONFLICT, "item 2 is not on sale");
            let (status, unknown) = shop.buy("999", Some(&carol), Some("c3")).await;
            // Redis knows sales, not the catalogue: no sale is "not on sale" there.
            let expected = match decider {
                FlashDecider::Redis => (StatusCode::CONFLICT, Some("not_on_sale")),
                FlashDecider::Database => (StatusCode::NOT_FOUND, Some("unknown_item")),
            };
            assert_eq!((status, unknown["outcome"].as_str()), expected, "{kind:?}");
            assert_eq!(shop.db.units_ordered(item(1)).await.unwrap(), 2, "{kind:?}");
            assert_eq!(shop.db_stock(1).await, 0, "{kind:?}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn contention_sells_exactly_the_stock_and_refusals_skip_the_database() {
    for decider in [FlashDecider::Redis, FlashDecider::Database] {
        for shop in Shop::on_every_database(config(decider)).await {
            let kind = (shop.kind(), decider);
            shop.sale_of(1, 20).await;
            let buyers = shop.buyers("b", 200).await;
            let mut tasks = tokio::task::JoinSet::new();
            for (i, (_, cookie)) in buyers.into_iter().enumerate() {
                let app = shop.router.clone();
                tasks.spawn(async move {
                    let key = format!("key-{i}");
                    buy_on(&app, "1", Some(&cookie), Some(&key)).await
                });
            }
            let mut outcomes: HashMap<(u16, String), u32> = HashMap::new();
            let mut orders = Vec::new();
            while let Some(done) = tasks.join_next().await {
                let (status, body) = done.unwrap();
                if let Some(order) = body["order_id"].as_i64() {
                    orders.push(order);
                }
                let outcome = body["outcome"].as_str().unwrap_or("none").to_owned();
                *outcomes.entry((status.as_u16(), outcome)).or_default() += 1;
            }
            let expected: HashMap<(u16, String), u32> = [
                ((200, "bought".to_owned()), 20),
                ((409, "sold_out".to_owned()), 180),
            ]
            .into();
            assert_eq!(outcomes, expected, "{kind:?}");
            orders.sort_unstable();
            orders.dedup();
            assert_eq!(orders.len(), 20, "{kind:?}: twenty different orders");
            assert_eq!(
                shop.db.units_ordered(item(1)).await.unwrap(),
                20,
                "{kind:?}"
            );
            assert_eq!(shop.db_stock(1).await, 0, "{kind:?}");
            let attempts = shop.recorded_attempts().await;
            match decider {
                FlashDecider::Redis => {
                    assert_eq!(shop.redis_stock(1).await, 0, "{kind:?}");
                    assert_eq!(attempts, 20, "{kind:?}: only winners reach the database");
                }
                // Each buyer's attempt was a transaction, and each refusal rolled
                // back: nothing a refused buyer sent is kept.
                FlashDecider::Database => assert_eq!(attempts, 20, "{kind:?}"),
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retries_get_one_answer_across_web_servers() {
    for shop in Shop::on_every_database(WebConfig::default()).await {
        let kind = shop.kind();
        shop.sale_of(1, 5).await;
        let other = shop.second_server();
        let buyers = shop.buyers("r", 10).await;
        // Each buyer sends the same attempt to both servers at once, twice.
        let mut tasks = tokio::task::JoinSet::new();
        for (i, (_, cookie)) in buyers.iter().enumerate() {
            for app in [
                shop.router.clone(),
                other.clone(),
                shop.router.clone(),
                other.clone(),
            ] {
                let cookie = cookie.clone();
                tasks.spawn(async move {
                    let answer = buy_on(&app, "1", Some(&cookie), Some("same-key")).await;
                    (i, answer)
                });
            }
        }
        let mut answers: HashMap<usize, Vec<(StatusCode, serde_json::Value)>> = HashMap::new();
        while let Some(done) = tasks.join_next().await {
            let (i, answer) = done.unwrap();
            answers.entry(i).or_default().push(answer);
        }
        let mut bought = 0;
        for (i, got) in &answers {
            // A retry racing the first attempt may be told to come back (503);
            // every answer given is the same one.
            let given: Vec<_> = got.iter().filter(|(s, _)| s.as_u16() != 503).collect();
            assert!(
                !given.is_empty(),
                "{kind}: buyer {i} got no answer: {got:?}"
            );
            assert!(
                given.iter().all(|a| *a == given[0]),
                "{kind}: buyer {i}: {got:?}"
            );
            // And a later retry on either server gets it too.
            let later = buy_on(&other, "1", Some(&buyers[*i].1), Some("same-key")).await;
            assert_eq!(&later, given[0], "{kind}: buyer {i}");
            bought += u32::from(given[0].0 == StatusCode::OK);
        }
        assert_eq!(bought, 5, "{kind}");
        assert_eq!(shop.db.units_ordered(item(1)).await.unwrap(), 5, "{kind}");
        assert_eq!(shop.recorded_attempts().await, 5, "{kind}");
    }
}

#[tokio::test]
async fn the_sale_window_and_the_per_user_limit_hold() {
    let limit_two = WebConfig {
        flash_limit: 2,
        ..WebConfig::default()
    };
    for shop in Shop::on_every_database(limit_two).await {
        let kind = shop.kind();
        let now = shop_db::unix_now();
        let terms = |start, end| Sale {
            stock: 10,
            price_cents: 100,
            start,
            end,
        };
        shop.sale_with(1, terms(now + 600, now + 1_200)).await;
        shop.sale_with(2, terms(now - 1_200, now - 600)).await;
        shop.sale_with(3, terms(now - 10, now + 600)).await;
        let dana = shop.login("dana").await;
        for id in ["1", "2"] {
            let (status, body) = shop.buy(id, Some(&dana), Some(&format!("w{id}"))).await;
            assert_eq!(
                (status, body["outcome"].as_str()),
                (StatusCode::CONFLICT, Some("not_on_sale")),
                "{kind}: item {id} is outside its window"
            );
        }
        for key in ["l1", "l2"] {
            assert_eq!(
                shop.buy("3", Some(&dana), Some(key)).await.0,
                StatusCode::OK
            );
        }
        let (status, body) = shop.buy("3", Some(&dana), Some("l3")).await;
        assert_eq!(
            (status, body["outcome"].as_str()),
            (StatusCode::CONFLICT, Some("limit_reached")),
            "{kind}"
        );
        assert_eq!(shop.redis_stock(3).await, 8, "{kind}");
        assert_eq!(shop.db_stock(3).await, 8, "{kind}");
        assert_eq!(shop.redis_stock(1).await, 10, "{kind}: nothing sold early");
    }
}

/// Terms no sale can have are refused by the library call itself (embedders
/// and the load scenario call it, not only the CLI), before anything is
/// written: no sale in the database, none in Redis.
#[tokio::test]
async fn a_sale_with_terms_out_of_range_is_refused_and_writes_nothing() {
    let shop = Shop::start(TestDb::sqlite(), WebConfig::default()).await;
    let stores = SaleStores {
        db: &shop.db,
        flash: &shop.state.flash,
        rows: &shop.state.rows,
        pages: &shop.state.pages,
    };
    let now = shop_db::unix_now();
    let good = Sale {
        stock: 10,
        price_cents: 100,
        start: now,
        end: now + 3_600,
    };
    let year = shop_app::sale::MAX_MINUTES * 60;
    let refused = [
        (Sale { stock: -1, ..good }, 1.0),
        (
            Sale {
                stock: shop_db::inventory::MAX_STOCK + 1,
                ..good
            },
            1.0,
        ),
        (
            Sale {
                price_cents: -1,
                ..good
            },
            1.0,
        ),
        (
            Sale {
                price_cents: 1_000_000_001,
                ..good
            },
            1.0,
        ),
        (Sale { end: now, ..good }, 1.0),
        (
            Sale {
                end: now + 59,
                ..good
            },
            1.0,
        ),
        (
            Sale {
                end: now - 600,
                ..good
            },
            1.0,
        ),
        (
            Sale {
                end: now + year + 1,
                ..good
            },
            1.0,
        ),
        (
            Sale {
                start: i64::MIN,
                ..good
            },
            1.0,
        ),
        (
            Sale {
                end: i64::MAX,
                ..good
            },
            1.0,
        ),
        (
            Sale {
                start: i64::MAX - 3_600,
                end: i64::MAX,
                ..good
            },
            1.0,
        ),
        (
            Sale {
                start: now + year,
                end: now + year + 60,
                ..good
            },
            1.0,
        ),
        (good, 0.0),
        (good, f64::NAN),
        (good, 86_401.0),
    ];
    for (sale, refresh) in refused {
        let error = shop_app::sale::start(&stores, item(1), sale, refresh)
            .await
            .expect_err("refused");
        assert_eq!(
            error.to_string(),
            shop_cache::domain::InvalidInput::SaleTerms.to_string(),
            "{sale:?} every {refresh} s"
        );
    }
    // A sale charges less than the item's regular price, never more.
    let regular = shop.db.item(item(1)).await.unwrap().unwrap().price_cents;
    let dearer = Sale {
        price_cents: regular + 1,
        ..good
    };
    assert_eq!(
        shop_app::sale::start(&stores, item(1), dearer, 1.0)
            .await
            .unwrap(),
        shop_app::sale::SaleSet::AboveRegular {
            regular_cents: regular
        }
    );
    assert!(shop.db.sales(now).await.unwrap().is_empty());
    assert!(
        shop.state.flash.state(item(1)).await.unwrap().is_none(),
        "nothing of a sale in Redis"
    );
    // The longest sale there is starts.
    let longest = Sale {
        end: now + year,
        ..good
    };
    assert!(
        shop_app::sale::start(&stores, item(1), longest, 86_400.0)
            .await
            .unwrap()
            .is_set()
    );
    assert_eq!(shop.redis_stock(1).await, 10);
}

/// A server that reserved units and died before (or after) writing their orders:
/// past the hold, the reconciler confirms what the database has and returns the
/// rest to stock; a late order for a returned unit is refused; drift and a sale
/// lost from Redis are repaired from the database.
#[tokio::test]
async fn the_reconciler_settles_what_a_dead_server_left() {
    // A hold the set-up below cannot outlast on a loaded machine (with 1 s, the
    // PostgreSQL half once took longer and its units were overdue at once).
    let hold = WebConfig {
        flash_hold: Duration::from_secs(5),
        ..WebConfig::default()
    };
    for shop in Shop::on_every_database(hold).await {
        let kind = shop.kind();
        shop.sale_of(1, 5).await;
        let buyers = shop.buyers("d", 3).await;
        let now = shop_db::unix_now();
        let flash = &shop.state.flash;
        let reserve = |(user, key): (UserId, &'static str)| async move {
            match flash
                .reserve(item(1), user, key, 1, now, None)
                .await
                .unwrap()
            {
                Reserve::Reserved(r) => r,
                other => panic!("{other:?}"),
            }
        };
        // a: died right after reserving. b: died after its order was committed.
        // c: alive but slow: its order comes after the reconciler gave up on it.
        reserve((buyers[0].0, "ka")).await;
        reserve((buyers[1].0, "kb")).await;
        let b = shop
            .db
            .record_flash_win(buyers[1].0, item(1), "kb", 1, now, None);
        let Ok(WinRecord::Ordered {
            order_id: b_order, ..
        }) = b.await
        else {
            panic!("{kind}: b's order")
        };
        reserve((buyers[2].0, "kc")).await;
        assert_eq!((shop.redis_stock(1).await, shop.db_stock(1).await), (2, 4));

        let reconciler = shop.reconciler();
        assert_eq!(
            reconciler.step().await.unwrap(),
            Reconciled::default(),
            "{kind}: nothing is overdue yet"
        );
        // Once the hold has passed, the three are settled (polled: the steps may
        // find them overdue one at a time).
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        let mut done = Reconciled::default();
        while done.confirmed + done.released < 3 {
            assert!(
                std::time::Instant::now() < deadline,
                "{kind}: never settled: {done:?}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
            let step = reconciler.step().await.unwrap();
            done.confirmed += step.confirmed;
            done.released += step.released;
        }
        assert_eq!((done.confirmed, done.released), (1, 2), "{kind}: {done:?}");
        // And /metrics says so.
        shop.state.metrics.register_reconciler(reconciler.totals());
        let metrics = shop.state.metrics.render(None, None);
        for line in [
            "shop_flash_reconciled_total{what=\"confirmed\"} 1",
            "shop_flash_reconciled_total{what=\"released\"} 2",
        ] {
            assert!(metrics.contains(line), "{kind}: {line} in {metrics}");
        }
        assert_eq!(
            (shop.redis_stock(1).await, shop.db_stock(1).await),
            (4, 4),
            "{kind}"
        );
        let late = shop
            .db
            .record_flash_win(buyers[2].0, item(1), "kc", 1, now, None)
            .await;
        assert_eq!(
            late.unwrap(),
            WinRecord::Earlier(shop_db::flash::BuyOutcome::Expired),
            "{kind}: a late order for a returned unit is refused"
        );
        assert_eq!(shop.db_stock(1).await, 4, "{kind}");
        // The buyers' retries get the settled answers.
        let (status, a) = shop.buy("1", Some(&buyers[0].1), Some("ka")).await;
        assert_eq!(
            (status, a["outcome"].as_str()),
            (StatusCode::CONFLICT, Some("expired"))
        );
        let (status, b) = shop.buy("1", Some(&buyers[1].1), Some("kb")).await;
        assert_eq!(
            (status, b["order_id"].as_i64()),
            (StatusCode::OK, Some(b_order))
        );
        // a may buy again with a new key: its unit and its count came back.
        let (status, _) = shop.buy("1", Some(&buyers[0].1), Some("ka2")).await;
        assert_eq!(status, StatusCode::OK, "{kind}");
        assert_eq!((shop.redis_stock(1).await, shop.db_stock(1).await), (3, 3));

        // Redis drifted (lost writes): set back to the database's when quiet.
        let mut raw = shop.conn.clone();
        let sale_key = Keys::default().sale(item(1));
        let _: () = redis::cmd("HSET")
            .arg(&sale_key)
            .arg("stock")
            .arg(9)
            .query_async(&mut raw)
            .await
            .unwrap();
        assert_eq!(reconciler.step().await.unwrap().corrected, 1, "{kind}");
        assert_eq!(shop.redis_stock(1).await, 3, "{kind}");
        // Redis lost the sale: loaded again from the database.
        let _: () = redis::cmd("DEL")
            .arg(&sale_key)
            .query_async(&mut raw)
            .await
            .unwrap();
        assert_eq!(reconciler.step().await.unwrap().reloaded, 1, "{kind}");
        assert_eq!(shop.redis_stock(1).await, 3, "{kind}");
        assert_eq!(shop.db.units_ordered(item(1)).await.unwrap(), 2, "{kind}");
    }
}

#[tokio::test]
async fn the_sale_page_is_one_shared_cached_shell() {
    let shop = Shop::start(TestDb::sqlite(), WebConfig::default()).await;
    shop.sale_of(1, 5).await;
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
    let title = shop.db.item(item(1)).await.unwrap().unwrap().title;
    assert!(html.contains(&title), "the title is in the shell");
    assert!(
        html.contains(&shop_web::assets::FLASH_JS.url()),
        "stock comes from the script"
    );

    let cookie = shop.login("dave2").await;
    let second = shop.send(page(Some(cookie))).await;
    assert_eq!(
        second.headers()["x-cache"],
        "HIT",
        "the same page for a logged-in visitor"
    );
    assert_eq!(html_of(second).await, html);

    // A sale started later shows at once: starting it drops the cached page.
    shop.sale_of(2, 3).await;
    let third = shop.send(page(None)).await;
    assert_eq!(third.headers()["x-cache"], "MISS");
    assert!(html_of(third).await.contains("data-item=\"2\""));
}

/// When a sale ends, its item page stops saying "On flash sale" at once (the
/// daemon that follows the sale board purges it at the end, once), not a page
/// cache TTL later, and offers "Add to cart" again without any script; the
/// units the item had beyond the sale's are its stock again.
#[tokio::test]
async fn the_item_page_of_a_sale_is_purged_at_the_sales_end() {
    let shop = Shop::start(TestDb::sqlite(), WebConfig::default()).await;
    shop.rank(&[3]).await;
    assert!(shop.db.set_stock(item(3), 50).await.unwrap());
    // Ends in 7 to 8 s: time for the page to be drawn and cached during it on
    // a loaded machine.
    let now = shop_db::unix_now();
    let end = now + 8;
    let sale = Sale {
        stock: 3,
        price_cents: 100,
        start: end - 60,
        end,
    };
    shop.sale_with(3, sale).await;
    let watcher = shop.state.take_sale_watcher().unwrap();
    watcher.step().await.unwrap();
    let mut ends = shop.state.sale_ends();
    let during = shop.send(get("/items/3")).await;
    assert!(html_of(during).await.contains("On flash sale"));
    let cached = shop.send(get("/items/3")).await;
    assert_eq!(
        cached.headers()["x-cache"],
        "HIT",
        "the sale's page is cached"
    );
    assert_eq!(ends.step(end - 1).await.unwrap(), 0, "not ended yet");
    assert_eq!(shop.db_stock(3).await, 3, "the sale's units");
    assert_eq!(shop.send(get("/items/3")).await.headers()["x-cache"], "HIT");

    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while shop_db::unix_now() < end {
        assert!(
            std::time::Instant::now() < deadline,
            "the clock stood still"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(ends.step(shop_db::unix_now()).await.unwrap(), 1);
    assert_eq!(shop.db_stock(3).await, 50, "the 47 kept back, given back");
    assert_eq!(
        ends.step(shop_db::unix_now()).await.unwrap(),
        0,
        "once per end"
    );
    let after = shop.send(get("/items/3")).await;
    assert_eq!(after.headers()["x-cache"], "MISS");
    let html = html_of(after).await;
    assert!(
        html.contains("id=\"add-to-cart\">") && !html.contains("sale-notice"),
        "{html}"
    );
}

/// An item page while the item's sale is coming or running says so and links
/// the sale page instead of offering "Add to cart" (whose answer would be 409
/// `on_sale`); once the sale is over, the page offers it again.
#[tokio::test]
async fn an_item_page_links_its_sale_while_it_runs_or_is_coming() {
    let shop = Shop::start(TestDb::sqlite(), WebConfig::default()).await;
    let page = || async { html_of(shop.send(get("/items/3")).await).await };
    let offers_the_cart =
        |html: &str| html.contains("id=\"add-to-cart\">") && !html.contains("sale-notice");
    assert!(offers_the_cart(&page().await), "no sale");

    let now = shop_db::unix_now();
    let terms = |start: i64, end: i64| Sale {
        stock: 3,
        price_cents: 499,
        start,
        end,
    };
    shop.sale_with(3, terms(now + 600, now + 4_200)).await;
    let coming = page().await;
    assert!(coming.contains("In a flash sale at $4.99 from"), "{coming}");
    assert!(coming.contains("href=\"/flash\""), "{coming}");
    assert!(coming.contains(&format!("data-sale-end=\"{}\"", now + 4_200)));
    assert!(coming.contains("id=\"add-to-cart\" hidden"), "{coming}");

    shop.sale_with(3, terms(now - 60, now + 3_600)).await;
    let running = page().await;
    assert!(
        running.contains("On flash sale at $4.99 until"),
        "{running}"
    );
    assert!(running.contains("id=\"add-to-cart\" hidden"), "{running}");
    assert!(offers_the_cart(
        &html_of(shop.send(get("/items/4")).await).await
    ));

    shop.sale_with(3, terms(now - 120, now - 60)).await;
    let over = page().await;
    assert!(offers_the_cart(&over), "{over}");
}

#[tokio::test]
async fn the_event_stream_pushes_each_change_and_ends_with_the_watcher() {
    let shop = Shop::start(TestDb::sqlite(), WebConfig::default()).await;
    let watcher = shop.state.take_sale_watcher().expect("a watcher to run");
    assert!(shop.state.take_sale_watcher().is_none(), "handed out once");
    let resp = shop.send(get("/api/flash/events")).await;
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(resp.headers()[header::CONTENT_TYPE], "text/event-stream");
    let mut body = resp.into_body();
    let mut next_data = async || -> Option<serde_json::Value> {
        loop {
            let frame = tokio::time::timeout(Duration::from_secs(5), body.frame())
                .await
                .expect("an event within 5 s")?
                .unwrap();
            if let Ok(bytes) = frame.into_data() {
                let text = String::from_utf8(bytes.to_vec()).unwrap();
                if let Some(data) = text.strip_prefix("data: ") {
                    return Some(serde_json::from_str(data.trim()).unwrap());
                }
            }
        }
    };
    assert_eq!(
        next_data().await.unwrap(),
        serde_json::json!([]),
        "no sale yet"
    );
    shop.sale_of(1, 2).await;
    watcher.step().await.unwrap();
    let first = next_data().await.unwrap();
    assert_eq!(
        (first[0]["item_id"].as_i64(), first[0]["stock"].as_i64()),
        (Some(1), Some(2))
    );
    shop.sale_of(3, 9).await;
    watcher.step().await.unwrap();
    let both = next_data().await.unwrap();
    assert_eq!(
        both.as_array().unwrap().len(),
        2,
        "every sale in one stream: {both}"
    );
    let buyer = shop.login("erin").await;
    assert_eq!(
        shop.buy("1", Some(&buyer), Some("e")).await.0,
        StatusCode::OK
    );
    watcher.step().await.unwrap();
    assert_eq!(next_data().await.unwrap()[0]["stock"], 1);
    drop(watcher);
    assert_eq!(next_data().await, None, "the stream ends with the watcher");
}

/// The reconciler's ledger, with a buy landing between its read of the sales
/// and its look at Redis (the moment a stale read would undo).
struct BuyWhileReading {
    ledger: DbLedger,
    app: Router,
    cookie: String,
}

impl shop_cache::flash_sale::Ledger for BuyWhileReading {
    async fn fence(
        &self,
        item: ItemId,
        user: UserId,
        key: &str,
    ) -> Result<Option<i64>, shop_cache::flash_sale::LedgerError> {
        self.ledger.fence(item, user, key).await
    }

    async fn sales(
        &self,
        since: i64,
    ) -> Result<Vec<(ItemId, shop_cache::flash_sale::SaleTerms)>, shop_cache::flash_sale::LedgerError>
    {
        let sales = self.ledger.sales(since).await?;
        let (status, body) = buy_on(&self.app, "1", Some(&self.cookie), Some("between")).await;
        assert_eq!(status, StatusCode::OK, "{body}");
        Ok(sales)
    }

    async fn stock(
        &self,
        item: ItemId,
    ) -> Result<Option<i64>, shop_cache::flash_sale::LedgerError> {
        self.ledger.stock(item).await
    }
}

#[tokio::test]
async fn a_buy_during_the_reconcilers_read_is_not_undone() {
    let shop = Shop::start(TestDb::sqlite(), WebConfig::default()).await;
    shop.sale_of(1, 5).await;
    let cookie = shop.login("fay").await;
    let reconciler = Reconciler::new(
        shop.state.flash.clone(),
        BuyWhileReading {
            ledger: DbLedger(shop.db.clone()),
            app: shop.router.clone(),
            cookie,
        },
    );
    let done = reconciler.step().await.unwrap();
    assert_eq!(done, Reconciled::default(), "nothing to correct");
    assert_eq!((shop.redis_stock(1).await, shop.db_stock(1).await), (4, 4));
}

/// Makes every flash-sale order fail to be written (SQLite: `RAISE(ROLLBACK)`,
/// PostgreSQL: an exception with an I/O error's code), or, with `cure`, stops it.
async fn fail_flash_orders(shop: &Shop, cure: bool) {
    let sql: &[&str] = match (shop.db.backend(), cure) {
        (shop_db::Backend::Sqlite, false) => &[
            "CREATE TRIGGER drill_fail BEFORE INSERT ON orders WHEN NEW.kind = 'flash' \
             BEGIN SELECT RAISE(ROLLBACK, 'drill: injected write error'); END",
        ],
        (shop_db::Backend::Sqlite, true) => &["DROP TRIGGER drill_fail"],
        (shop_db::Backend::Postgres, false) => &[
            "CREATE FUNCTION drill_fail() RETURNS trigger LANGUAGE plpgsql AS $$ \
             BEGIN RAISE EXCEPTION 'drill: injected write error' USING ERRCODE = 'io_error'; END $$",
            "CREATE TRIGGER drill_fail BEFORE INSERT ON orders FOR EACH ROW \
             WHEN (NEW.kind = 'flash') EXECUTE FUNCTION drill_fail()",
        ],
        (shop_db::Backend::Postgres, true) => &["DROP TRIGGER drill_fail ON orders"],
    };
    for statement in sql {
        sqlx::query(statement)
            .execute(shop.db.pool())
            .await
            .unwrap();
    }
}

/// The database fails between Redis's reservation and the order: the buyer is
/// never told "bought" without a committed order (a 503 with `Retry-After`), the
/// reconciler gives the units back after the hold, a retry with the same key then
/// gets the settled answer, and every "bought" answer is an order in the database.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_failing_between_reserve_and_record_never_reports_a_win_without_its_order() {
    for shop in Shop::on_every_database(short_hold()).await {
        let kind = shop.kind();
        shop.sale_of(1, 5).await;
        let buyers = shop.buyers("w", 3).await;
        fail_flash_orders(&shop, false).await;
        let mut bought = HashMap::new();
        for (i, (_, cookie)) in buyers.iter().enumerate().take(2) {
            let key = format!("f{i}");
            let resp = buy_request(&shop, cookie, &key).await;
            assert_eq!(
                resp.status(),
                StatusCode::SERVICE_UNAVAILABLE,
                "{kind}: {key}"
            );
            let retry_after = resp.headers()[header::RETRY_AFTER].to_str().unwrap();
            assert_eq!(retry_after, "1", "{kind}: when the reconciler settles it");
            let body = shop_testapp::json(resp).await;
            assert_eq!(body["error"], "not_recorded", "{kind}: {body}");
        }
        let flash_orders = async || -> Vec<i64> {
            sqlx::query_scalar("SELECT id FROM orders WHERE kind = 'flash' ORDER BY id")
                .fetch_all(shop.db.read_pool())
                .await
                .unwrap()
        };
        assert!(flash_orders().await.is_empty(), "{kind}");
        assert_eq!(shop.redis_stock(1).await, 3, "{kind}: two units held");

        // The fault ends: the next buyer is served at once.
        fail_flash_orders(&shop, true).await;
        let (status, body) = shop.buy("1", Some(&buyers[2].1), Some("f2")).await;
        assert_eq!(status, StatusCode::OK, "{kind}: {body}");
        bought.insert("f2", body["order_id"].as_i64().unwrap());

        // Past the hold, the reconciler gives the two units back...
        let reconciler = shop.reconciler();
        let deadline = std::time::Instant::now() + Duration::from_secs(15);
        let mut released = 0;
        while released < 2 {
            assert!(
                std::time::Instant::now() < deadline,
                "{kind}: never released"
            );
            released += reconciler.step().await.unwrap().released;
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        // ...and the failed buys' retries get the settled answer: not bought.
        for (i, (_, cookie)) in buyers.iter().enumerate().take(2) {
            let key = format!("f{i}");
            let (status, body) = shop.buy("1", Some(cookie), Some(&key)).await;
            assert_eq!(
                (status, body["outcome"].as_str()),
                (StatusCode::CONFLICT, Some("expired")),
                "{kind}: {key}"
            );
        }
        assert_eq!(
            flash_orders().await,
            bought.values().copied().collect::<Vec<_>>(),
            "{kind}: every 'bought' answer is an order, and nothing else is"
        );
        assert_eq!(
            (shop.redis_stock(1).await, shop.db_stock(1).await),
            (4, 4),
            "{kind}: the failed buys' units are back on sale"
        );
    }
}

async fn buy_request(shop: &Shop, cookie: &str, key: &str) -> Response {
    let req = Request::post("/api/flash/1/buy")
        .header(header::COOKIE, cookie)
        .header(shop_web::flash::IDEMPOTENCY_KEY, key)
        .body(Body::empty())
        .unwrap();
    shop.send(req).await
}

/// Event streams are bounded: per client address and in all (503 with
/// `Retry-After` past either, nothing opened), a place comes back the moment a
/// stream's client goes away, and every stream ends after its lifetime.
#[tokio::test]
async fn event_streams_are_capped_per_address_and_in_all_and_end_after_their_lifetime() {
    let config = WebConfig {
        trust_forwarded_for: true,
        event_streams: shop_web::event_streams::StreamLimits {
            total: 3,
            per_address: 2,
            lifetime: Duration::from_secs(600),
        },
        ..WebConfig::default()
    };
    let shop = Shop::start(TestDb::sqlite(), config).await;
    let from = |address: &str| {
        Request::get("/api/flash/events")
            .header("x-forwarded-for", address)
            .body(Body::empty())
            .unwrap()
    };
    let one = shop.send(from("10.0.0.1")).await;
    let two = shop.send(from("10.0.0.1")).await;
    assert_eq!(
        (one.status(), two.status()),
        (StatusCode::OK, StatusCode::OK)
    );
    let refused = shop.send(from("10.0.0.1")).await;
    assert_eq!(
        refused.status(),
        StatusCode::TOO_MANY_REQUESTS,
        "the address holds its share"
    );
    assert!(refused.headers().contains_key(header::RETRY_AFTER));
    let body = String::from_utf8(
        refused
            .into_body()
            .collect()
            .await
            .unwrap()
            .to_bytes()
            .to_vec(),
    )
    .unwrap();
    assert!(body.contains("too many live pages"), "{body}");
    let third = shop.send(from("10.0.0.2")).await;
    assert_eq!(third.status(), StatusCode::OK, "another address has room");
    let full = shop.send(from("10.0.0.3")).await;
    assert_eq!(
        full.status(),
        StatusCode::SERVICE_UNAVAILABLE,
        "the process is full"
    );
    assert_eq!(shop.state.streams.open(), 3);
    // A client goes away: its place is free at once.
    drop(one);
    assert_eq!(shop.state.streams.open(), 2);
    assert_eq!(shop.send(from("10.0.0.1")).await.status(), StatusCode::OK);
}

#[tokio::test]
async fn an_event_stream_ends_after_its_lifetime_and_gives_its_place_back() {
    let config = WebConfig {
        event_streams: shop_web::event_streams::StreamLimits {
            lifetime: Duration::from_millis(300),
            ..Default::default()
        },
        ..WebConfig::default()
    };
    let shop = Shop::start(TestDb::sqlite(), config).await;
    let resp = shop.send(get("/api/flash/events")).await;
    assert_eq!(resp.status(), StatusCode::OK);
    // The whole body arrives and ends (the first event, then the end of stream).
    let body = tokio::time::timeout(Duration::from_secs(10), resp.into_body().collect())
        .await
        .expect("the stream ends by itself")
        .unwrap()
        .to_bytes();
    assert!(String::from_utf8_lossy(&body).contains("data: []"));
    assert_eq!(shop.state.streams.open(), 0);
}

/// One account looping buys with fresh keys is slowed down: past the per-minute
/// limit, 429 with `Retry-After`, nothing decided; another account is not.
#[tokio::test]
async fn buys_are_rate_limited_per_account() {
    let shop = Shop::start(
        TestDb::sqlite(),
        WebConfig {
            flash_buys_per_minute: 5,
            ..config(FlashDecider::Redis)
        },
    )
    .await;
    shop.sale_of(1, 1).await;
    let looper = shop.login("looper").await;
    let other = shop.login("other").await;
    for n in 0..5 {
        let resp = buy_request(&shop, &looper, &format!("k{n}")).await;
        assert_ne!(resp.status(), StatusCode::TOO_MANY_REQUESTS, "buy {n}");
    }
    for n in 5..20 {
        let resp = buy_request(&shop, &looper, &format!("k{n}")).await;
        assert_eq!(resp.status(), StatusCode::TOO_MANY_REQUESTS, "buy {n}");
        let wait: u64 = resp.headers()[header::RETRY_AFTER]
            .to_str()
            .unwrap()
            .parse()
            .unwrap();
        assert!((1..=60).contains(&wait), "{wait}");
    }
    let resp = buy_request(&shop, &other, "k0").await;
    assert_eq!(
        resp.status(),
        StatusCode::CONFLICT,
        "sold out, not throttled"
    );
    // Nothing the refused buys sent was stored: the one unit went to the first buy.
    let answers: u64 = redis::AsyncCommands::hlen(&mut shop.redis.conn().await, "sale-answers:1")
        .await
        .unwrap();
    assert_eq!(answers, 1);
}

/// Whether item `n`'s sale is over in Redis (ended, or not loaded at all).
async fn ended_in_redis(shop: &Shop, n: u64) -> bool {
    let now = shop_db::unix_now();
    match shop.state.flash.state(item(n)).await.unwrap() {
        Some(sale) => sale.end <= now,
        None => true,
    }
}

#[tokio::test]
async fn a_retired_item_stops_selling_even_when_the_purge_after_it_fails() {
    for shop in Shop::on_every_database(WebConfig::default()).await {
        let kind = shop.kind();
        let had = shop.db_stock(5).await;
        shop.sale_of(5, 10).await;
        // The pages in a cache Redis of their own, paused when the item is
        // retired: the purge fails after the commit.
        let cache = shop_testkit::TestRedis::start();
        let quick = redis::aio::ConnectionManagerConfig::new()
            .set_response_timeout(Some(Duration::from_millis(300)))
            .set_connection_timeout(Some(Duration::from_millis(200)))
            .set_number_of_retries(1);
        let cache_conn = shop_cache::connect_with(&cache.url(), quick).await.unwrap();
        let pages = shop_page_cache::PageStore::in_cache_or_state(
            Some(cache_conn),
            shop.conn.clone(),
            &Keys::default(),
            shop_page_cache::DEFAULT_TTL,
        );
        let catalogue = shop_app::catalogue::Catalogue {
            pages: &pages,
            ..shop.state.catalogue()
        };
        // A cached page showing the item, for the purge to reach.
        let ticket = pages.begin_render().await.unwrap();
        let key = shop_page_cache::PageRequest::new("/items/5", None).key();
        let page = shop_page_cache::StoredPage::new(200, Vec::new(), b"item 5");
        let tags = [shop_app::page_tags::item(item(5))];
        pages.store(&key, &page, &tags, &ticket).await.unwrap();
        // The cache Redis stops taking writes (as for a slow fork or a failover):
        // the purge after the commit times out.
        let _: () = redis::cmd("CLIENT")
            .arg("PAUSE")
            .arg(15_000)
            .arg("WRITE")
            .query_async(&mut cache.conn().await)
            .await
            .unwrap();
        let retired = catalogue.retire(item(5)).await;
        assert!(
            matches!(
                retired,
                Err(shop_app::catalogue::CatalogueError::NotPurged { .. })
            ),
            "{kind}: {retired:?}"
        );
        assert!(
            ended_in_redis(&shop, 5).await,
            "{kind}: the sale ended first"
        );

        let buyer = shop.login("rita").await;
        let (status, body) = shop.buy("5", Some(&buyer), Some("after-retire")).await;
        assert_eq!(body["outcome"], "not_on_sale", "{kind}: {status} {body}");
        // Nothing sold: the sale's units and those kept back for after it.
        assert_eq!(shop.db_stock(5).await, had.max(10), "{kind}");
        assert_eq!(shop.recorded_attempts().await, 0, "{kind}: no order");
    }
}

#[tokio::test]
async fn the_database_refuses_a_win_for_an_item_retired_or_off_sale_and_the_unit_goes_back() {
    for shop in Shop::on_every_database(WebConfig::default()).await {
        let kind = shop.kind();
        // A retire whose Redis step never happened: the database has the item
        // retired (and its sale ended); Redis still sells it.
        shop.sale_of(6, 10).await;
        shop.db
            .retire_item(item(6), shop_db::unix_now())
            .await
            .unwrap();
        let buyer = shop.login("rita").await;
        let (status, body) = shop.buy("6", Some(&buyer), Some("r-1")).await;
        assert_eq!(body["outcome"], "not_on_sale", "{kind}: {status} {body}");
        assert_eq!(shop.redis_stock(6).await, 10, "{kind}: the unit is back");
        assert_eq!(shop.recorded_attempts().await, 0, "{kind}: no order");

        // Retired again, it finishes: the sale ends in Redis too.
        assert!(!ended_in_redis(&shop, 6).await, "{kind}");
        shop.state.catalogue().retire(item(6)).await.unwrap();
        assert!(
            ended_in_redis(&shop, 6).await,
            "{kind}: ended by the second retire"
        );

        // `shop items purge` finishes it the same way.
        shop.sale_of(7, 10).await;
        shop.db
            .retire_item(item(7), shop_db::unix_now())
            .await
            .unwrap();
        shop.state.catalogue().purge(&[item(7)]).await.unwrap();
        assert!(ended_in_redis(&shop, 7).await, "{kind}: ended by the purge");

        // A sale the database has over (its window moved to the past) while
        // Redis still sells it: refused, the unit back.
        shop.sale_of(8, 10).await;
        let past = shop_db::unix_now() - 10;
        let moved = Sale {
            stock: 10,
            price_cents: 500,
            start: past - 60,
            end: past,
        };
        assert!(
            shop.db
                .set_sale(item(8), moved, shop_db::unix_now())
                .await
                .unwrap()
                .is_set()
        );
        let (_, body) = shop.buy("8", Some(&buyer), Some("r-2")).await;
        assert_eq!(body["outcome"], "not_on_sale", "{kind}: {body}");
        assert_eq!(shop.redis_stock(8).await, 10, "{kind}: the unit is back");
        assert_eq!(shop.recorded_attempts().await, 0, "{kind}: no order");
    }
}

#[tokio::test]
async fn a_flash_buy_is_charged_the_sale_price_whatever_the_regular_price_does() {
    for shop in Shop::on_every_database(WebConfig::default()).await {
        let kind = shop.kind();
        shop.sale_of(5, 10).await;
        let edit =
            shop_cache::domain::catalogue::ItemEdit::new(None, None, Some(999_999), None).unwrap();
        shop.state
            .catalogue()
            .update(item(5), &edit, None)
            .await
            .unwrap();
        let buyer = shop.login("rita").await;
        let (_, body) = shop.buy("5", Some(&buyer), Some("p-1")).await;
        assert_eq!(body["outcome"], "bought", "{kind}: {body}");
        let first = body["order_id"].as_i64().unwrap();
        assert_eq!(
            shop.db.order_lines(first).await.unwrap(),
            [(item(5), 1, 500)],
            "{kind}: the sale's price, as its page showed it"
        );

        // A sale started again at another price charges that price from then on.
        // (Its stock, 10, is what is left: sam's unit comes out of it.)
        let now = shop_db::unix_now();
        shop.sale_with(
            5,
            Sale {
                stock: 10,
                price_cents: 300,
                start: now - 60,
                end: now + 3_600,
            },
        )
        .await;
        let other = shop.login("sam").await;
        let (_, body) = shop.buy("5", Some(&other), Some("p-2")).await;
        let order = body["order_id"].as_i64().unwrap();
        assert_eq!(
            shop.db.order_lines(order).await.unwrap(),
            [(item(5), 1, 300)],
            "{kind}"
        );
        // It is the same sale (it had not ended): what rita bought in it still
        // counts toward the limit of one, and her first buy's answer stays.
        let (_, body) = shop.buy("5", Some(&buyer), Some("p-3")).await;
        assert_eq!(body["outcome"], "limit_reached", "{kind}: {body}");
        let (_, body) = shop.buy("5", Some(&buyer), Some("p-1")).await;
        assert_eq!(body["outcome"], "bought", "{kind}: {body}");
        assert_eq!(body["order_id"].as_i64(), Some(first), "{kind}: {body}");
        assert_eq!(
            shop.redis_stock(5).await,
            9,
            "{kind}: the new stock, less sam's unit"
        );
    }
}

/// A sale never charges more than the item costs: an edit that would put the
/// regular price below a sale's that has not ended is refused (409
/// `below_sale_price`, nothing saved); an import that does so anyway stops the
/// sale's buys (`not_on_sale`, the unit goes back).
#[tokio::test]
async fn a_sale_never_charges_more_than_the_items_regular_price() {
    for shop in Shop::on_every_database(WebConfig::default()).await {
        let kind = shop.kind();
        shop.sale_of(5, 10).await;
        let before = shop.db.item(item(5)).await.unwrap().unwrap();
        let cheaper = |cents| {
            shop_cache::domain::catalogue::ItemEdit::new(None, None, Some(cents), None).unwrap()
        };
        let refused = shop
            .state
            .catalogue()
            .update(item(5), &cheaper(499), None)
            .await
            .expect_err("below the sale's price");
        assert!(
            matches!(
                refused,
                shop_app::catalogue::CatalogueError::BelowSale {
                    sale_cents: 500,
                    ..
                }
            ),
            "{kind}: {refused}"
        );
        let web = shop_web::error::WebError::from(refused);
        assert_eq!(web.status(), StatusCode::CONFLICT, "{kind}");
        assert_eq!(
            shop.db.item(item(5)).await.unwrap().unwrap(),
            before,
            "{kind}: nothing saved"
        );
        // The sale's own price is as low as the regular one may go.
        shop.state
            .catalogue()
            .update(item(5), &cheaper(500), None)
            .await
            .unwrap();

        let mut fields = shop.db.item(item(5)).await.unwrap().unwrap().fields();
        fields.price_cents = 100;
        shop.db
            .import_items(&[(item(5), fields, 0)], RetiredInImport::Keep)
            .await
            .unwrap();
        let buyer = shop.login("ivy").await;
        let (status, body) = shop.buy("5", Some(&buyer), Some("i-1")).await;
        assert_eq!(status, StatusCode::CONFLICT, "{kind}: {body}");
        assert_eq!(body["outcome"], "not_on_sale", "{kind}: {body}");
        assert_eq!(shop.redis_stock(5).await, 10, "{kind}: the unit went back");
        assert_eq!(shop.db_stock(5).await, 10, "{kind}");
    }
}

/// A buy names the sale price its buyer was shown (`?price_cents=`, as the sale
/// page sends it): once the sale was started again at another price, that buy
/// buys nothing (409 `price_changed`, the unit still on sale) and leaves nothing
/// stored, so its key asked again at the new price buys, charged that price.
/// Whoever decides.
#[tokio::test]
async fn a_buy_at_a_price_no_longer_the_sales_buys_nothing() {
    for decider in [FlashDecider::Redis, FlashDecider::Database] {
        for shop in Shop::on_every_database(config(decider)).await {
            let kind = format!("{} {decider:?}", shop.kind());
            shop.sale_of(5, 10).await;
            let rita = shop.login("rita").await;
            let at = |cents: &str| format!("/api/flash/5/buy?price_cents={cents}");
            let (status, body) = buy_at(&shop.router, &at("500"), Some(&rita), Some("r-1")).await;
            assert_eq!(status, StatusCode::OK, "{kind}: {body}");
            let order = body["order_id"].as_i64().unwrap();
            assert_eq!(
                shop.db.order_lines(order).await.unwrap(),
                [(item(5), 1, 500)],
                "{kind}"
            );

            let now = shop_db::unix_now();
            let dearer = Sale {
                stock: 10,
                price_cents: 700,
                start: now - 60,
                end: now + 3_600,
            };
            shop.sale_with(5, dearer).await;
            let sam = shop.login("sam").await;
            for _ in 0..2 {
                let (status, body) =
                    buy_at(&shop.router, &at("500"), Some(&sam), Some("s-1")).await;
                assert_eq!(status, StatusCode::CONFLICT, "{kind}: {body}");
                assert_eq!(body["outcome"], "price_changed", "{kind}: {body}");
            }
            assert_eq!(shop.redis_stock(5).await, 10, "{kind}: the unit is on sale");
            assert_eq!(shop.db_stock(5).await, 10, "{kind}");
            let sam_id = shop.db.user_named("sam").await.unwrap().unwrap();
            assert!(
                shop.db.orders_of(sam_id, 10).await.unwrap().is_empty(),
                "{kind}: nothing ordered"
            );
            // Nothing stored for the refused attempts: rita's win is all.
            assert_eq!(shop.recorded_attempts().await, 1, "{kind}");
            let answers: u64 =
                redis::AsyncCommands::hlen(&mut shop.redis.conn().await, "sale-answers:5")
                    .await
                    .unwrap();
            let rita_only = u64::from(decider == FlashDecider::Redis);
            assert_eq!(answers, rita_only, "{kind}");

            let (status, body) = buy_at(&shop.router, &at("700"), Some(&sam), Some("s-1")).await;
            assert_eq!(status, StatusCode::OK, "{kind}: {body}");
            let order = body["order_id"].as_i64().unwrap();
            assert_eq!(
                shop.db.order_lines(order).await.unwrap(),
                [(item(5), 1, 700)],
                "{kind}"
            );

            for bad in ["abc", "-1", "1000000001", ""] {
                let (status, body) = buy_at(&shop.router, &at(bad), Some(&sam), Some("s-3")).await;
                assert_eq!(status, StatusCode::BAD_REQUEST, "{kind} {bad:?}: {body}");
            }
            assert_eq!(shop.db_stock(5).await, 9, "{kind}: sam's one unit");
        }
    }
}

/// Both deciders refuse in one order: not on sale, the buyer's limit, sold out,
/// the price. A buyer at the limit hears `limit_reached` whatever the price
/// named or the stock left; one who is not hears `sold_out` before
/// `price_changed`.
#[tokio::test]
async fn both_deciders_refuse_in_the_same_order() {
    for decider in [FlashDecider::Redis, FlashDecider::Database] {
        for shop in Shop::on_every_database(config(decider)).await {
            let kind = format!("{} {decider:?}", shop.kind());
            shop.sale_of(5, 2).await;
            let at = |cents: &str| format!("/api/flash/5/buy?price_cents={cents}");
            let rita = shop.login("rita").await;
            let (status, body) = buy_at(&shop.router, &at("500"), Some(&rita), Some("r-1")).await;
            assert_eq!(status, StatusCode::OK, "{kind}: {body}");
            // At her limit (1), in stock, a wrong price: the limit first.
            let (status, body) = buy_at(&shop.router, &at("999"), Some(&rita), Some("r-2")).await;
            assert_eq!(status, StatusCode::CONFLICT, "{kind}: {body}");
            assert_eq!(body["outcome"], "limit_reached", "{kind}: {body}");

            let sam = shop.login("sam").await;
            let (status, body) = buy_at(&shop.router, &at("500"), Some(&sam), Some("s-1")).await;
            assert_eq!(status, StatusCode::OK, "{kind}: {body}");
            // Sold out now: one at the limit still hears the limit.
            for (cookie, key) in [(&rita, "r-3"), (&sam, "s-2")] {
                let (status, body) =
                    buy_at(&shop.router, &at("999"), Some(cookie), Some(key)).await;
                assert_eq!(status, StatusCode::CONFLICT, "{kind}: {body}");
                assert_eq!(body["outcome"], "limit_reached", "{kind}: {body}");
            }
            // One who bought nothing, at a wrong price: sold out before the price.
            let tom = shop.login("tom").await;
            let (status, body) = buy_at(&shop.router, &at("999"), Some(&tom), Some("t-1")).await;
            assert_eq!(status, StatusCode::CONFLICT, "{kind}: {body}");
            assert_eq!(body["outcome"], "sold_out", "{kind}: {body}");
            assert_eq!(shop.db_stock(5).await, 0, "{kind}");
        }
    }
}

/// A shop with a sale of 10 units of item 5, and `name` logged in with a
/// unit reserved under `key` whose order is not written yet (an attempt in
/// flight, as a web server holds it): the shop, `name`'s cookie and id, the
/// reservation.
async fn reserved_in_flight(
    name: &str,
    key: &str,
) -> (Shop, String, UserId, shop_cache::flash_sale::Reservation) {
    let shop = Shop::start(TestDb::sqlite(), config(FlashDecider::Redis)).await;
    shop.sale_of(5, 10).await;
    let cookie = shop.login(name).await;
    let user = shop.db.user_named(name).await.unwrap().unwrap();
    let now = shop_db::unix_now();
    let reservation = match shop
        .state
        .flash
        .reserve(item(5), user, key, 1, now, None)
        .await
    {
        Ok(Reserve::Reserved(reservation)) => reservation,
        other => panic!("{other:?}"),
    };
    (shop, cookie, user, reservation)
}

/// A retry that finds its key's first attempt in flight waits for its answer;
/// when the database refuses that attempt's unit (the answer forgotten, the
/// unit back), the retry decides again rather than waiting out its time.
#[tokio::test]
async fn a_retry_waiting_on_an_attempt_the_database_refused_decides_again() {
    let (shop, cookie, _, first) = reserved_in_flight("wendy", "w-1").await;
    let router = shop.router.clone();
    let retry = tokio::spawn(async move { buy_on(&router, "5", Some(&cookie), Some("w-1")).await });
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!retry.is_finished(), "it waits on the attempt in flight");
    assert!(
        shop.state
            .flash
            .settle(&first, Settlement::Refuse)
            .await
            .unwrap()
    );
    let (status, body) = retry.await.unwrap();
    assert_eq!(status, StatusCode::OK, "{body}");
    assert!(body["order_id"].as_i64().is_some(), "{body}");
    assert_eq!(shop.redis_stock(5).await, 9);
    assert_eq!(shop.db_stock(5).await, 9);
}

/// A key the reconciler fenced off (its first attempt's order came too late)
/// whose refusal reached Redis first, so Redis kept no answer: a retry with the
/// key reserves a unit, the database answers `expired`, and that unit goes back
/// at once, not after another hold, nor counted against the buyer's limit.
#[tokio::test]
async fn a_retry_of_a_fenced_key_gives_its_unit_back_at_once() {
    let (shop, cookie, xena, first) = reserved_in_flight("xena", "x-1").await;
    assert_eq!(
        shop.db.fence_flash(xena, item(5), "x-1").await.unwrap(),
        None
    );
    assert!(
        shop.state
            .flash
            .settle(&first, Settlement::Refuse)
            .await
            .unwrap()
    );
    let (status, body) = shop.buy("5", Some(&cookie), Some("x-1")).await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    assert_eq!(body["outcome"], "expired", "{body}");
    let sale = shop.state.flash.snapshot(item(5)).await.unwrap().unwrap();
    assert_eq!(
        (sale.stock, sale.pending),
        (10, 0),
        "the unit is back, nothing held"
    );
    let (status, body) = shop.buy("5", Some(&cookie), Some("x-2")).await;
    assert_eq!(status, StatusCode::OK, "within the limit of one: {body}");
}

/// The buy of a sale's last unit purges the item's page, which said "In stock".
#[tokio::test]
async fn the_last_unit_bought_purges_the_item_page_that_said_in_stock() {
    let shop = Shop::start(TestDb::sqlite(), WebConfig::default()).await;
    shop.sale_of(2, 1).await;
    shop.rank(&[2]).await;
    let in_stock = "class=\"stock in-stock\">In stock<";
    let _ = shop.get("/items/2", None).await;
    let cached = shop.get("/items/2", None).await;
    assert_eq!(cached.headers()["x-cache"], "HIT");
    assert!(shop_testapp::text(cached).await.contains(in_stock));

    let cookie = shop.login("last-buyer").await;
    let (status, body) = shop.buy("2", Some(&cookie), Some("the-last-one")).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let page = shop_testapp::text(shop.get("/items/2", None).await).await;
    assert!(
        page.contains("class=\"stock out-of-stock\">Out of stock<"),
        "{page}"
    );
}
