//! The shop's HTTP tier: axum routes and the tower layers around them.
//!
//! Each route module exports a `router()`; [`router`] merges them over one
//! [`AppState`] and wraps them in the shop's layers, outermost first: the security
//! headers, errors as HTML pages for people ([`error::ErrorPagesLayer`]), the
//! request log ([`request_log`]), the limits (panic catching, timeout, body
//! size: [`http_limits`]), cross-site protection ([`csrf`]), then per route
//! the metrics ([`metrics::TimedLayer`]), sessions ([`session`], on the
//! visitors' routes only, not on probes or static files) and, on item pages,
//! their insights, listings and the flash-sale shell, the page cache
//! ([`page_cache`]).
//! `/metrics` and the detailed health check are on [`internal_router`], for a
//! listener of their own.
//! Errors from the layers below become HTTP answers in one place, [`error::WebError`].

/// The `Cache-Control` of every answer that is one visitor's own (a cart, an
/// account, `/api/me`, a form, an answer to a POST, admin and ops pages): no
/// cache between the shop and the browser may keep it, nor the browser itself.
pub const PERSONAL: &str = "private, no-store";

/// How long one Redis command of a request may take by default
/// ([`WebConfig::redis_budget`]).
pub const DEFAULT_REDIS_BUDGET: Duration = Duration::from_millis(100);

pub mod account;
pub mod address_shares;
pub mod admin;
pub mod answered;
pub mod assets;
pub mod auth;
pub mod browse;
pub mod cart;
pub mod catalogue;
pub mod client_shares;
pub mod csrf;
pub mod devices;
pub mod error;
pub mod event_streams;
pub mod flash;
pub mod health;
pub mod http_limits;
pub mod insights;
pub mod listing_ends;
pub mod me;
pub mod metrics;
pub mod ops;
pub mod page_cache;
pub mod pictures;
pub mod purged_copy;
pub mod request;
pub mod request_log;
pub mod sale_ends;
pub mod search_cache;
pub mod session;
pub mod templates;
pub mod uncached;
pub mod view_shares;
pub mod views;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::middleware::from_fn_with_state;
use shop_cache::RedisConn;
use shop_cache::analytics::{Analytics, TopItems, TopItemsRefresher};
use shop_cache::cart::Carts;
use shop_cache::flash_sale::{Board, FlashSales, SaleWatcher};
use shop_cache::insights::Insights;
use shop_cache::keys::Keys;
use shop_cache::login_limit::{AddressLimit, LoginLimiter, LoginLimits, RateLimit};
use shop_cache::row_cache::RowCache;
use shop_cache::session::Sessions;
use shop_db::Db;
use shop_page_cache::PageStore;
use tokio::sync::watch;

use crate::error::WebError;

/// The default flash-sale buys one account may send per minute: a person clicks
/// a few times; a script looping buys is slowed to one a second on average.
pub const DEFAULT_FLASH_BUYS_PER_MINUTE: u32 = 60;

/// Carts one client address may start per minute by default: an office of
/// shoppers behind one NAT starts far fewer; a script starting carts to fill the
/// session index gets 86,400 a day from one address (4x from an IPv6 /56, 16x
/// from a /48) instead of thousands a second.
pub const DEFAULT_CART_STARTS_PER_MINUTE: u32 = 60;

/// Settings of the web tier.
#[derive(Debug, Clone)]
pub struct WebConfig {
    /// Most units of one sale item a user may buy.
    pub flash_limit: i64,
    /// Who decides a flash-sale buy: Redis (the default) or the database.
    pub flash_decider: flash::FlashDecider,
    /// How long a reserved unit waits for its order before the reconciler settles
    /// it (returns it to stock if no order was recorded).
    pub flash_hold: Duration,
    /// How long the database may refuse writes before `/healthz` answers 503
    /// (writes that only wait never make it answer 503).
    pub write_grace: Duration,
    /// Mark the session cookie `Secure` (the shop is served over HTTPS).
    pub secure_cookies: bool,
    /// Most of one item a cart line may hold.
    pub max_quantity: u32,
    /// How long a cached page is fresh.
    pub page_ttl: Duration,
    /// How long past its TTL a cached page is still served (while it is rendered
    /// again; instead of an error).
    pub page_stale: shop_page_cache::StaleGrace,
    /// Only items ranked below this in views have their pages cached.
    pub rank_limit: u64,
    /// Most lines (different items) a cart may hold.
    pub max_cart_lines: u32,
    /// How long a logged-in user's cart lives left untouched.
    pub account_cart_ttl: Duration,
    /// Login attempts allowed per client address and per account name.
    pub login_limits: LoginLimits,
    /// Flash-sale buys one account may send per minute (beyond: 429).
    pub flash_buys_per_minute: u32,
    /// Carts one client address may start per minute (a first line in a session
    /// not logged in; beyond: 429, nothing written). Every such cart is a session
    /// the cleaner keeps for its idle time, so this bounds what one client can
    /// add to the session index.
    pub cart_starts_per_minute: u32,
    /// Renders and database reads one client address may cause per
    /// [`uncached::WINDOW`] (beyond: 429): see [`uncached`].
    pub uncached_per_address: u32,
    /// Item views one client address may have counted per minute, per server
    /// (beyond: served, counted nowhere): see [`view_shares`].
    pub counted_views_per_minute: u32,
    /// The shop sits behind a reverse proxy that appends the client's address to
    /// `X-Forwarded-For`: count login attempts by that, not by the proxy's address.
    pub trust_forwarded_for: bool,
    /// How long one Redis command of a request may take before the request goes
    /// on without it (a guest session, a page from the tier or the database, a
    /// 503 for a write), counted against its node
    /// ([`shop_cache::RedisConn::with_budget`]).
    pub redis_budget: Duration,
    /// The edge caches in front of the shop every purge also reaches (none:
    /// only the shop's own caches).
    pub edge_purger: Option<shop_page_cache::EdgePurger>,
    /// The item of the demo sale `shop serve` starts on a new shop, if it does:
    /// the sale page marks that item's sale as a demo.
    pub demo_sale: Option<shop_cache::domain::ItemId>,
    /// How many sale-page event streams may be open, and for how long.
    pub event_streams: event_streams::StreamLimits,
    /// How long sessions live (the touch refuses a token past them; the cleaner,
    /// configured alike, removes such sessions).
    pub session_lifetimes: shop_cache::session::Lifetimes,
    /// Most sessions one user may have: a login beyond it ends their least
    /// recently seen one (0: no cap).
    pub max_sessions_per_user: u32,
    /// Bytes of pages each process keeps in its own memory in front of Redis
    /// ([`page_cache::tier`]); 0: no in-process tier.
    pub page_tier_bytes: u64,
    /// The fewest distinct viewers before an item page says what share of them
    /// bought it.
    pub insights_min_viewers: u64,
    /// The fewest orders holding both items before one is recommended with the
    /// other ("shoppers who bought this also bought").
    pub insights_min_co_buyers: u64,
}

impl Default for WebConfig {
    fn default() -> Self {
        Self {
            flash_limit: shop_db::flash::DEFAULT_PER_USER_LIMIT,
            flash_decider: flash::FlashDecider::default(),
            flash_hold: shop_cache::flash_sale::DEFAULT_HOLD,
            write_grace: health::DEFAULT_WRITE_GRACE,
            secure_cookies: false,
            max_quantity: shop_cache::cart::DEFAULT_MAX_QUANTITY,
            page_ttl: shop_page_cache::DEFAULT_TTL,
            page_stale: shop_page_cache::DEFAULT_STALE,
            rank_limit: shop_page_cache::DEFAULT_RANK_LIMIT,
            max_cart_lines: shop_cache::cart::DEFAULT_MAX_LINES,
            account_cart_ttl: shop_cache::cart::DEFAULT_ACCOUNT_CART_TTL,
            login_limits: LoginLimits::default(),
            flash_buys_per_minute: DEFAULT_FLASH_BUYS_PER_MINUTE,
            cart_starts_per_minute: DEFAULT_CART_STARTS_PER_MINUTE,
            uncached_per_address: uncached::DEFAULT_UNCACHED_PER_ADDRESS,
            counted_views_per_minute: view_shares::DEFAULT_COUNTED_VIEWS_PER_MINUTE,
            trust_forwarded_for: false,
            redis_budget: DEFAULT_REDIS_BUDGET,
            edge_purger: None,
            demo_sale: None,
            event_streams: event_streams::StreamLimits::default(),
            session_lifetimes: shop_cache::session::Lifetimes::default(),
            max_sessions_per_user: shop_cache::session::DEFAULT_MAX_PER_USER,
            page_tier_bytes: page_cache::tier::DEFAULT_TIER_BYTES,
            insights_min_viewers: shop_cache::insights::DEFAULT_MIN_VIEWERS,
            insights_min_co_buyers: shop_cache::insights::DEFAULT_MIN_CO_BUYERS,
        }
    }
}

/// What every handler may use: a handle to the shared [`AppParts`], so the clone
/// axum makes for every middleware and handler is one reference count (a profile of
/// the cached item view found cloning the parts one by one at 9% of the web tier's
/// CPU).
#[derive(Clone)]
pub struct AppState(Arc<AppParts>);

impl std::ops::Deref for AppState {
    type Target = AppParts;

    fn deref(&self) -> &AppParts {
        &self.0
    }
}

/// The parts of the application state.
pub struct AppParts {
    /// The relational store.
    pub db: Db,
    /// Login sessions in Redis.
    pub sessions: Sessions,
    /// Carts in Redis.
    pub carts: Carts,
    /// The view ranking.
    pub analytics: Analytics,
    /// Cached database rows (`inv:<id>`).
    pub rows: RowCache,
    /// Flash sales decided in Redis.
    pub flash: FlashSales,
    /// Every loaded sale's state as this process last read it, for the sale
    /// pages' event streams; published by the [`SaleWatcher`] that
    /// [`AppState::take_sale_watcher`] hands out.
    pub sale_board: watch::Receiver<Board>,
    /// That watcher, until the server takes it to run.
    sale_watcher: Mutex<Option<SaleWatcher>>,
    /// Viewed-then-bought and also-bought.
    pub insights: Insights,
    /// Where whole pages are cached.
    pub pages: PageStore,
    /// This process's copy of the ranking's top, the page cache's gate (kept by
    /// the [`TopItemsRefresher`] a server runs; until then, and whenever it is
    /// stale, the gate asks Redis).
    pub top_items: TopItems,
    /// This process's pages in memory, in front of `pages` (kept coherent by the
    /// [`page_cache::TierFeed`] a server runs: [`AppState::tier_feed`]).
    pub tier: Option<Arc<page_cache::PageTier>>,
    /// Search results in memory (only beside a tier, whose feed hears purges).
    pub search_cache: Option<Arc<search_cache::SearchCache>>,
    /// The rows of recently viewed items `/api/me` shows, in memory (only beside a
    /// tier, whose feed hears purges).
    pub item_copies: Option<Arc<purged_copy::ItemCopies>>,
    /// Logged-in users' names, in memory (a name never changes).
    pub user_names: me::UserNames,
    /// The listings' page ends, in memory.
    pub listing_ends: listing_ends::ListingEnds,
    /// The home page's featured items and the departments, in memory.
    pub featured: catalogue::Featured,
    /// Login attempt counters.
    pub login_limiter: LoginLimiter,
    /// Flash-sale buys per account.
    pub buy_limit: RateLimit,
    /// New carts (a session's first line, not logged in) per client address.
    pub cart_starts: AddressLimit,
    /// Logouts of sessions nobody is logged in to, per client address:
    /// [`auth::GUEST_LOGOUTS_PER_MINUTE`].
    pub guest_logouts: address_shares::AddressShares,
    /// Uncached work (renders, database reads) per client address: [`uncached`].
    pub uncached: AddressLimit,
    /// The addresses this process refused uncached work lately.
    pub uncached_refusals: uncached::Refusals,
    /// The shared Redis handle (its circuit breaker's state, for health and metrics).
    pub redis: RedisConn,
    /// The last `/healthz` answer, reused for a second.
    pub health: health::HealthCache,
    /// Counters for `/metrics`.
    pub metrics: Arc<metrics::Metrics>,
    /// The last minutes of traffic for `/ops`, kept by an [`ops::TrafficSampler`]
    /// (see [`AppState::traffic_sampler`]).
    pub traffic: Arc<ops::Traffic>,
    /// The sale pages' open event streams.
    pub streams: Arc<event_streams::Streams>,
    /// Settings.
    pub config: WebConfig,
}

impl AppState {
    /// Every Redis-backed part over one shared connection, under `keys`.
    pub fn new(db: Db, conn: RedisConn, keys: Keys, config: WebConfig) -> Self {
        Self::with_cache(db, conn, None, keys, config)
    }

    /// Every Redis-backed part over `conn`, except the cached pages when `cache`
    /// is given: a Redis for rebuildable data only, which may evict (`maxmemory`
    /// with `allkeys-lru`), so pages can never push out sessions, carts or sales.
    pub fn with_cache(
        db: Db,
        conn: RedisConn,
        cache: Option<RedisConn>,
        keys: Keys,
        config: WebConfig,
    ) -> Self {
        // Every part below serves requests: each Redis command within the budget.
        let conn = conn.with_budget(config.redis_budget);
        let cache = cache.map(|cache| cache.with_budget(config.redis_budget));
        let top_items = TopItems::new(conn.clone(), keys.clone(), config.rank_limit);
        let pages = PageStore::in_cache_or_state(cache, conn.clone(), &keys, config.page_ttl)
            .ranked(keys.item_views(), config.rank_limit)
            .with_stale(config.page_stale)
            .with_top({
                let top = top_items.clone();
                move |item| top.contains(item)
            })
            .with_edges(config.edge_purger.clone());
        let tier = (config.page_tier_bytes > 0)
            .then(|| page_cache::PageTier::new(config.page_tier_bytes, &pages));
        let flash = FlashSales::new(conn.clone(), keys.clone()).with_hold(config.flash_hold);
        let (watcher, sale_board) = SaleWatcher::new(flash.clone());
        Self::from_parts(AppParts {
            flash,
            sale_board,
            sale_watcher: Mutex::new(Some(watcher)),
            db,
            sessions: Sessions::new(conn.clone(), keys.clone())
                .with_lifetimes(config.session_lifetimes)
                .with_max_per_user(config.max_sessions_per_user),
            carts: Carts::new(conn.clone(), keys.clone(), config.max_quantity)
                .with_max_lines(config.max_cart_lines)
                .with_account_ttl(config.account_cart_ttl),
            login_limiter: LoginLimiter::new(conn.clone(), keys.clone(), config.login_limits),
            buy_limit: RateLimit::new(
                conn.clone(),
                keys.clone(),
                "buy",
                config.flash_buys_per_minute,
                Duration::from_secs(60),
            ),
            cart_starts: AddressLimit::new(
                conn.clone(),
                keys.clone(),
                "cart-start",
                config.cart_starts_per_minute,
                Duration::from_secs(60),
            ),
            guest_logouts: address_shares::AddressShares::new(
                auth::GUEST_LOGOUTS_PER_MINUTE,
                Duration::from_secs(60),
            ),
            uncached: AddressLimit::new(
                conn.clone(),
                keys.clone(),
                "uncached",
                config.uncached_per_address,
                uncached::WINDOW,
            ),
            uncached_refusals: uncached::Refusals::default(),
            redis: conn.clone(),
            health: health::HealthCache::default(),
            analytics: Analytics::new(conn.clone(), keys.clone()),
            rows: RowCache::new(conn.clone(), keys.clone()),
            insights: Insights::new(conn.clone(), keys.clone())
                .with_min_co_buyers(config.insights_min_co_buyers),
            featured: catalogue::Featured::new(pages.purges_seen().clone(), tier.clone()),
            listing_ends: listing_ends::ListingEnds::new(
                browse::LISTING_PAGE,
                pages.purges_seen().clone(),
            ),
            search_cache: tier
                .clone()
                .map(|tier| Arc::new(search_cache::SearchCache::new(&pages, tier))),
            item_copies: tier
                .clone()
                .map(|tier| Arc::new(purged_copy::item_copies(&pages, tier))),
            user_names: me::UserNames::default(),
            pages,
            top_items,
            tier,
            metrics: Arc::default(),
            traffic: Arc::default(),
            streams: Arc::default(),
            config,
        })
    }

    /// The state over parts built by the caller.
    pub fn from_parts(parts: AppParts) -> Self {
        Self(Arc::new(parts))
    }

    /// The session layer over this state's sessions, counting its failures in
    /// the metrics.
    pub fn session_layer(&self) -> session::SessionLayer {
        session::SessionLayer {
            errors: self.metrics.session_errors.clone(),
            trust_forwarded_proto: self.config.trust_forwarded_for,
            view_shares: Some(view_shares::ViewShares::new(
                self.config.counted_views_per_minute,
                self.config.trust_forwarded_for,
            )),
            ..session::SessionLayer::new(self.sessions.clone(), self.config.secure_cookies)
        }
        .with_views(views::ItemViews {
            item_of: page_cache::item_path,
            write_behind: true,
        })
        .with_holdings_on(me::PATH)
    }

    /// A page-cache layer over this state's page store and in-process tier, its
    /// counts reported in the metrics as `name`.
    pub fn page_cache(
        &self,
        name: &'static str,
        config: page_cache::PageCacheConfig,
    ) -> page_cache::PageCacheLayer {
        let layer = page_cache::PageCacheLayer::new(self.pages.clone(), config)
            .with_tier(self.tier.clone());
        self.metrics.register_page_cache(name, layer.stats());
        layer
    }

    /// Where a placed order is recorded for the insights (failures counted in
    /// the metrics).
    pub fn order_insights(&self) -> shop_app::orders::OrderInsights<'_> {
        shop_app::orders::OrderInsights {
            insights: &self.insights,
            errors: &self.metrics.insight_errors,
        }
    }

    /// The checkout workflow over this state's stores.
    pub fn checkout(&self) -> shop_app::orders::Checkout<'_> {
        shop_app::orders::Checkout {
            db: &self.db,
            carts: &self.carts,
            insights: self.order_insights(),
            pages: &self.pages,
        }
    }

    /// The login, sign-up and logout workflows over this state's stores.
    pub fn accounts(&self) -> shop_app::accounts::Accounts<'_> {
        shop_app::accounts::Accounts {
            db: &self.db,
            sessions: &self.sessions,
            carts: &self.carts,
            limiter: &self.login_limiter,
        }
    }

    /// The catalogue's change workflows (add, edit, retire, import, purge) over
    /// this state's stores.
    pub fn catalogue(&self) -> shop_app::catalogue::Catalogue<'_> {
        shop_app::catalogue::Catalogue {
            db: &self.db,
            pages: &self.pages,
            rows: &self.rows,
            ranking: &self.analytics,
            sales: &self.flash,
        }
    }

    /// The flash-sale buy workflow over this state's stores and settings.
    pub fn buy(&self) -> shop_app::flash::Buy<'_> {
        shop_app::flash::Buy {
            db: &self.db,
            flash: &self.flash,
            insights: self.order_insights(),
            decider: self.config.flash_decider,
            limit: self.config.flash_limit,
            pages: &self.pages,
        }
    }

    /// A daemon that samples this state's metrics into [`AppParts::traffic`] (a
    /// server runs one).
    pub fn traffic_sampler(&self) -> ops::TrafficSampler {
        ops::TrafficSampler::new(self.metrics.clone(), self.traffic.clone())
    }

    /// The daemon that asks Redis the health check's question each second, so
    /// an idle server's breakers learn of a stall (a server runs one; see
    /// [`health::HealthWatch`]).
    pub fn health_watch(&self) -> health::HealthWatch {
        health::HealthWatch::new(self.clone())
    }

    /// The daemon that keeps [`AppParts::top_items`] current (a server runs one).
    pub fn top_items_refresher(&self) -> TopItemsRefresher {
        TopItemsRefresher(self.top_items.clone())
    }

    /// The daemon that keeps [`AppParts::tier`] coherent (a server runs one; the
    /// tier serves nothing until it has subscribed). `None` without a tier.
    pub fn tier_feed(&self) -> Option<page_cache::TierFeed> {
        let tier = self.tier.clone()?;
        Some(page_cache::TierFeed::new(tier, &self.pages))
    }

    /// The daemon that purges the pages of a flash sale at its end (a server runs
    /// one beside its sale watcher, whose board it follows).
    pub fn sale_ends(&self) -> sale_ends::SaleEnds {
        sale_ends::SaleEnds::new(self.sale_board.clone(), self.pages.clone(), self.db.clone())
    }

    /// The daemon that keeps [`AppParts::sale_board`] current, the first time it is
    /// asked for (a server runs it until shutdown; stopping it ends the sale pages'
    /// event streams). `None` after that.
    pub fn take_sale_watcher(&self) -> Option<SaleWatcher> {
        self.sale_watcher
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .take()
    }
}

/// What only operators may read, for a listener of its own on a private address
/// (`shop serve --metrics-bind`, 127.0.0.1 by default): `/metrics` (Prometheus
/// text: traffic, sessions, the page cache, the breaker, the daemons) and a
/// `/healthz` that says which part is failing. On the public address these told
/// anyone the shop's traffic and internals; the public `/healthz` now says only
/// the status. No session, no page cache, the same hardening as the public router.
pub fn internal_router(state: AppState) -> Router {
    let app = Router::new()
        .route(
            "/metrics",
            axum::routing::get(metrics::metrics).with_state(state.clone()),
        )
        .merge(health::detailed_router(state))
        .fallback(|| async { WebError::not_found("there is no such page") });
    http_limits::harden(app, &http_limits::HttpLimits::default())
}

/// The whole application, wrapped last (outermost) in [`http_limits::harden`]:
/// request timeout, body limit, panic catching and the request log.
pub fn router(state: AppState) -> Router {
    let timed = || metrics::TimedLayer(state.metrics.clone());
    // What visitors use: every request is a session's.
    let visitors = Router::new()
        .merge(catalogue::router(state.clone()))
        .merge(account::router(state.clone()))
        .merge(browse::router(state.clone()))
        .merge(ops::router(state.clone()))
        .merge(admin::router(state.clone()))
        .merge(cart::router(state.clone()))
        .merge(auth::router(state.clone()))
        .merge(me::router(state.clone()))
        .merge(devices::router(state.clone()))
        .merge(insights::router(state.clone()))
        .merge(flash::router(state.clone()))
        // One stack, one box per route: each `Router::layer` boxes every route
        // again, and a request clones (and drops) each box on its way down.
        // The timing is outermost: a route's latency is the session's touch and
        // the page's, and a call the session layer refuses (a bad `/api/me`
        // query) is counted under its route too.
        .route_layer(
            tower::ServiceBuilder::new()
                .layer(timed())
                .layer(from_fn_with_state(
                    Arc::new(state.session_layer()),
                    session::track_shared,
                ))
                .layer(page_cache::AdminBypassLayer(state.clone())),
        );
    // Probes and static files: no session (a load balancer polling `/healthz`
    // must not create a session per probe). `/metrics` is not here: see
    // [`internal_router`].
    let operations = Router::new()
        .merge(health::router(state.clone()))
        .merge(assets::router())
        .merge(pictures::router(state.clone()))
        .route_layer(timed());
    let app = visitors
        .merge(operations)
        .fallback(|| async { WebError::not_found("there is no such page") })
        .layer(csrf::CsrfLayer {
            https_only: state.config.secure_cookies,
        });
    // `harden` puts the error pages (`error::ErrorPagesLayer`) outside its own
    // limits, so they cover every answer, the limits' included: no second copy
    // here. What no route counted (the limits' answers, unknown paths) is
    // counted there.
    http_limits::harden_counted(
        app,
        &http_limits::HttpLimits::default(),
        state.metrics.clone(),
    )
}
