//! The settings of the long-running processes, in sections, each field declaring
//! its flag, environment variable, default and range once.

use std::net::SocketAddr;

use std::time::Duration;

use clap::{Args, FromArgMatches};
use serde::Deserialize;
use shop_cache::analytics;
use shop_cache::cart::DEFAULT_MAX_QUANTITY;
use shop_cache::session;
use shop_cache::session_cleaner::{
    DEFAULT_BATCH, DEFAULT_CAP, DEFAULT_DUTY, DEFAULT_GUEST_IDLE, MAX_BATCH,
};
use shop_db::flash::DEFAULT_PER_USER_LIMIT;
use shop_page_cache as page_cache;

use super::edge::EdgeSettings;
use super::redis::RedisSettings;

use super::file::toml_error;
use super::secret::SecretUrl;

/// Every setting of the shop's long-running processes (`serve` reads them all,
/// `work` and the other subcommands the sections they need), layered as the module
/// says. The settings file has the same shape.
#[derive(Debug, Clone, Args, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Settings {
    /// The HTTP server.
    #[command(flatten, next_help_heading = "Server")]
    pub server: ServerSettings,
    /// What the web tier allows and caches.
    #[command(flatten, next_help_heading = "Web")]
    pub web: WebSettings,
    /// Where the hot state lives.
    #[command(flatten, next_help_heading = "Redis")]
    pub redis: RedisSettings,
    /// Where the durable state lives.
    #[command(flatten, next_help_heading = "Database")]
    pub database: DatabaseSettings,
    /// The background daemons.
    #[command(flatten, next_help_heading = "Daemons")]
    pub workers: WorkerSettings,
    /// The edge caches in front.
    #[command(flatten, next_help_heading = "Edge")]
    pub edge: EdgeSettings,
}

/// The HTTP server's settings (`[server]`).
#[derive(Debug, Clone, Args, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ServerSettings {
    /// Address to listen on (port 0 picks a free one).
    #[arg(long, env = "SHOP_BIND", default_value = "127.0.0.1:8080")]
    pub bind: SocketAddr,
    /// Where operators read `/metrics` and the detailed `/healthz` (never on the
    /// public address). Default: 127.0.0.1 on the port after `--bind`'s (8081),
    /// any free port when `--bind`'s is 0; the address is printed at start.
    #[arg(long, env = "SHOP_METRICS_BIND")]
    pub metrics_bind: Option<SocketAddr>,
    /// Start the private redis-server pair (under ./data/redis) even if a Redis is
    /// named (REDIS_URL, a cluster). Without one named, it is started anyway: the
    /// shop never uses a Redis nobody named.
    #[arg(long, env = "SHOP_MANAGED_REDIS")]
    pub managed_redis: bool,
    /// Megabytes the private cache Redis (pages) may use before it evicts the
    /// least recently used; started beside the private state Redis.
    #[arg(
        long,
        env = "SHOP_MANAGED_CACHE_MB",
        default_value_t = 256,
        value_parser = clap::value_parser!(u64).range(1..=1_048_576),
    )]
    pub managed_cache_mb: u64,
    /// Seconds a client has to send a request's head (and an idle keep-alive
    /// connection stays open) before its connection is closed.
    #[arg(long, env = "SHOP_HEADER_TIMEOUT",
          default_value_t = crate::server::DEFAULT_HEADER_TIMEOUT.as_secs(),
          value_parser = clap::value_parser!(u64).range(1..=3_600))]
    pub header_timeout: u64,
    /// Seconds requests in flight may still run after SIGINT/SIGTERM before the
    /// server closes their connections and exits.
    #[arg(long, env = "SHOP_SHUTDOWN_GRACE",
          default_value_t = crate::server::DEFAULT_SHUTDOWN_GRACE.as_secs(),
          value_parser = clap::value_parser!(u64).range(0..=3_600))]
    pub shutdown_grace: u64,
    /// Seconds the server goes on serving after SIGINT/SIGTERM while its
    /// `/healthz` answers 503 `"draining"`, so the load balancer or edge in
    /// front (Varnish's probe: a look every 2 s, out after 2 failed of 3) stops
    /// sending it requests before it stops taking them; then the shutdown
    /// grace. A second signal ends it at once. 0: stop at once.
    #[arg(long, env = "SHOP_DRAIN_SECONDS", default_value_t = 0,
          value_parser = clap::value_parser!(u64).range(0..=600))]
    pub drain_seconds: u64,
    /// Connections open at once; at the cap, new ones wait until one closes. Kept
    /// below the open-files limit (raised to the system's maximum at start).
    #[arg(long, env = "SHOP_MAX_CONNECTIONS",
          default_value_t = crate::server::DEFAULT_MAX_CONNECTIONS as u64,
          value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    pub max_connections: u64,
    /// Connections one client address may hold at once (IPv6: per /64, 4x per
    /// /56, 16x per /48); past it, a new one is closed at once. Not applied with
    /// `--trust-forwarded-for`: behind a reverse proxy every connection is the
    /// proxy's.
    #[arg(long, env = "SHOP_MAX_CONNECTIONS_PER_ADDRESS",
          default_value_t = crate::server::DEFAULT_MAX_CONNECTIONS_PER_ADDRESS as u64,
          value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    pub max_connections_per_address: u64,
}

impl WebSettings {
    /// Whether `serve` starts a demo sale: `--demo-sale`, else `--demo`.
    pub fn demo_sale(&self) -> bool {
        self.demo_sale.unwrap_or(self.demo)
    }

    /// Whether `serve` adds the demo accounts: `--demo-users`, else `--demo`.
    pub fn demo_users(&self) -> bool {
        self.demo_users.unwrap_or(self.demo)
    }
}

impl ServerSettings {
    /// The operators' listener's address: `--metrics-bind`, or its default.
    pub fn metrics_addr(&self) -> SocketAddr {
        self.metrics_bind.unwrap_or_else(|| {
            let port = match self.bind.port() {
                0 | u16::MAX => 0,
                port => port + 1,
            };
            SocketAddr::from(([127, 0, 0, 1], port))
        })
    }
}

/// The web tier's settings (`[web]`).
#[derive(Debug, Clone, Args, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct WebSettings {
    /// Most units of one sale item a user may buy.
    #[arg(long, env = "SHOP_FLASH_LIMIT", default_value_t = DEFAULT_PER_USER_LIMIT,
          value_parser = clap::value_parser!(i64).range(1..))]
    pub flash_limit: i64,
    /// Who decides a flash-sale buy: `redis` (one script per buy, only winners
    /// write to the database) or `database` (a transaction per buy: the older
    /// design, kept to measure against).
    #[arg(long, env = "SHOP_FLASH_DECIDER", value_enum, default_value_t = FlashDeciderArg::Redis)]
    pub flash_decider: FlashDeciderArg,
    /// Seconds a reserved flash-sale unit waits for its order before the
    /// reconciler settles it (a unit whose server died goes back on sale then).
    #[arg(long, env = "SHOP_FLASH_HOLD", default_value_t = shop_cache::flash_sale::DEFAULT_HOLD.as_secs(),
          value_parser = clap::value_parser!(u64).range(1..=3_600))]
    pub flash_hold: u64,
    /// Flash-sale buys one account may send per minute; beyond it, 429 with
    /// `Retry-After`.
    #[arg(long, env = "SHOP_FLASH_BUYS_PER_MINUTE", default_value_t = shop_web::DEFAULT_FLASH_BUYS_PER_MINUTE,
          value_parser = clap::value_parser!(u32).range(1..))]
    pub flash_buys_per_minute: u32,
    /// Carts one client address may start per minute (a first line in a session
    /// not logged in); beyond, 429 with `Retry-After` and nothing written. IPv6:
    /// per /64, 4x per /56, 16x per /48.
    #[arg(long, env = "SHOP_CART_STARTS_PER_ADDRESS", default_value_t = shop_web::DEFAULT_CART_STARTS_PER_MINUTE,
          value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub cart_starts_per_address: u32,
    /// Uncached work one client address may cause per 10 seconds: pages rendered
    /// behind the page cache (misses, items outside the cached top, listing pages
    /// not stored, insights misses) and searches not answered from memory; beyond,
    /// 429 with `Retry-After`. Cached pages never count. IPv6: per /64, 4x per /56,
    /// 16x per /48. Raise it for a load generator on one address.
    #[arg(long, env = "SHOP_UNCACHED_PER_ADDRESS", default_value_t = shop_web::uncached::DEFAULT_UNCACHED_PER_ADDRESS,
          value_parser = clap::value_parser!(u32).range(1..=10_000_000))]
    pub uncached_per_address: u32,
    /// Item views one client address may have counted per minute in the ranking,
    /// histories and insights, per server; beyond, served and counted nowhere.
    #[arg(long, env = "SHOP_COUNTED_VIEWS_PER_ADDRESS", default_value_t = shop_web::view_shares::DEFAULT_COUNTED_VIEWS_PER_MINUTE,
          value_parser = clap::value_parser!(u32).range(1..=10_000_000))]
    pub counted_views_per_address: u32,
    /// Seconds the database may refuse writes before `/healthz` answers 503
    /// (`"database": "read_only"`) so load balancers take this server out; shorter
    /// refusals, and writes that only wait (a lock, a queue), answer 200
    /// `"degraded"`.
    #[arg(long, env = "SHOP_WRITE_GRACE", default_value_t = shop_web::health::DEFAULT_WRITE_GRACE.as_secs(),
          value_parser = clap::value_parser!(u64).range(0..=3_600))]
    pub write_grace: u64,
    /// A demo shop: seed the demo catalogue when the catalogue is empty, add the
    /// demo accounts (their passwords are published in the README) and start a
    /// demo flash sale when none is running. `scripts/run` passes it; a shop with
    /// real customers never does (without it, `serve` writes nothing made-up).
    #[arg(long, env = "SHOP_DEMO")]
    pub demo: bool,
    /// With `--demo`: how many items the demo catalogue has when it is seeded.
    #[arg(long, env = "SHOP_DEMO_ITEMS", default_value_t = shop_db::seed::DEFAULT_ITEMS,
          value_parser = clap::value_parser!(u64).range(1..=10_000_000))]
    pub demo_items: u64,
    /// Start a demo flash sale (the first item on sale, 100 units at half price,
    /// 24 hours) when no sale is running or coming. Default: `--demo`'s value.
    #[arg(long, env = "SHOP_DEMO_SALE", num_args = 0..=1, default_missing_value = "true",
          value_parser = clap::builder::BoolishValueParser::new())]
    pub demo_sale: Option<bool>,
    /// Add the demo accounts (alice, bob, carol) when missing: for a demo, never
    /// for a shop on the internet. Default: `--demo`'s value.
    #[arg(long, env = "SHOP_DEMO_USERS", num_args = 0..=1, default_missing_value = "true",
          value_parser = clap::builder::BoolishValueParser::new())]
    pub demo_users: Option<bool>,
    /// Most of one item a cart line may hold.
    #[arg(long, env = "SHOP_MAX_QUANTITY", default_value_t = DEFAULT_MAX_QUANTITY,
          value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub max_quantity: u32,
    /// Most lines (different items) a cart may hold.
    #[arg(long, env = "SHOP_MAX_CART_LINES", default_value_t = shop_cache::cart::DEFAULT_MAX_LINES,
          value_parser = clap::value_parser!(u32).range(1..=1_000))]
    pub max_cart_lines: u32,
    /// Days a logged-in user's cart (the account's, on every device) lives left
    /// untouched; every change renews it.
    #[arg(long, env = "SHOP_ACCOUNT_CART_DAYS", default_value_t = 90,
          value_parser = clap::value_parser!(u64).range(1..=3_650))]
    pub account_cart_days: u64,
    /// Login attempts one client address may make per minute.
    #[arg(long, env = "SHOP_LOGIN_LIMIT_ADDRESS",
          default_value_t = shop_cache::login_limit::LoginLimits::default().per_address,
          value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub login_limit_address: u32,
    /// Failed login attempts on one account name per minute, from all addresses,
    /// before it slows down to one try per 60/N seconds (a browser that logged in
    /// to that account before still goes through).
    #[arg(long, env = "SHOP_LOGIN_LIMIT_NAME",
          default_value_t = shop_cache::login_limit::LoginLimits::default().per_name,
          value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub login_limit_name: u32,
    /// Most sessions one user may have at once; a login beyond it ends their
    /// least recently seen session (0: no cap).
    #[arg(long, env = "SHOP_MAX_SESSIONS_PER_USER",
          default_value_t = shop_cache::session::DEFAULT_MAX_PER_USER,
          value_parser = clap::value_parser!(u32).range(0..=100_000))]
    pub max_sessions_per_user: u32,
    /// The shop is behind a reverse proxy that appends the client's address to
    /// X-Forwarded-For and sets X-Forwarded-Proto: every per-address limit (login
    /// attempts, new carts, uncached work, flash buys, event streams) counts the
    /// address in X-Forwarded-For's last entry, and `X-Forwarded-Proto: https` is
    /// believed. Without it, behind a proxy every client shares the proxy's limits.
    #[arg(long, env = "SHOP_TRUST_FORWARDED_FOR")]
    pub trust_forwarded_for: bool,
    /// With `--trust-forwarded-for`: the proxies' addresses or networks
    /// (comma-separated, `10.0.0.0/8,192.168.1.7`); a connection from any other
    /// peer is closed at once, so no client past the proxies can name its own
    /// address. Default: loopback and the private networks.
    #[arg(long, env = "SHOP_TRUSTED_PROXIES",
          value_parser = clap::value_parser!(shop_cache::domain::client::Networks))]
    pub trusted_proxies: Option<shop_cache::domain::client::Networks>,
    /// Milliseconds one Redis command of a request may take: past it the request
    /// goes on without that node (a guest session, the page from the tier or the
    /// database, 503 for a write) and the node fails fast until a probe answers.
    #[arg(long, env = "SHOP_REDIS_BUDGET_MS",
          default_value_t = shop_web::DEFAULT_REDIS_BUDGET.as_millis() as u64,
          value_parser = clap::value_parser!(u64).range(1..=60_000))]
    pub redis_budget_ms: u64,
    /// Seconds a cached page is kept.
    #[arg(long, env = "SHOP_PAGE_TTL", default_value_t = page_cache::DEFAULT_TTL.as_secs(),
          value_parser = clap::value_parser!(u64).range(1..=86_400))]
    pub page_ttl: u64,
    /// Seconds past its TTL a cached page is still served while one request (across
    /// every web server) renders it again: no shopper waits for the render of a
    /// page that was cached.
    #[arg(long, env = "SHOP_PAGE_STALE_WHILE_REVALIDATE",
          default_value_t = page_cache::DEFAULT_STALE.while_revalidate.as_secs(),
          value_parser = clap::value_parser!(u64).range(0..=86_400))]
    pub page_stale_while_revalidate: u64,
    /// Seconds past its TTL a cached page is still served instead of an error while
    /// the database cannot render it (unreachable or locked).
    #[arg(long, env = "SHOP_PAGE_STALE_IF_ERROR",
          default_value_t = page_cache::DEFAULT_STALE.if_error.as_secs(),
          value_parser = clap::value_parser!(u64).range(0..=86_400))]
    pub page_stale_if_error: u64,
    /// Only items ranked below this in views have their pages cached.
    #[arg(long, env = "SHOP_RANK_LIMIT", default_value_t = page_cache::DEFAULT_RANK_LIMIT)]
    pub rank_limit: u64,
    /// Megabytes of cached pages each web server keeps in its own memory in front
    /// of Redis (kept coherent by pub/sub; 0: none).
    #[arg(long, env = "SHOP_PAGE_TIER_MB",
          default_value_t = page_cache::tier::DEFAULT_TIER_BYTES >> 20,
          value_parser = clap::value_parser!(u64).range(0..=65_536))]
    pub page_tier_mb: u64,
    /// The fewest distinct viewers (in the last two weeks) before an item page
    /// says what share of them bought it.
    #[arg(long, env = "SHOP_INSIGHTS_MIN_VIEWERS",
          default_value_t = shop_cache::insights::DEFAULT_MIN_VIEWERS,
          value_parser = clap::value_parser!(u64).range(1..=1_000_000_000))]
    pub insights_min_viewers: u64,
    /// The fewest orders (decayed: one two weeks old counts half) that held both
    /// items before an item page recommends one with the other.
    #[arg(long, env = "SHOP_INSIGHTS_MIN_CO_BUYERS",
          default_value_t = shop_cache::insights::DEFAULT_MIN_CO_BUYERS,
          value_parser = clap::value_parser!(u64).range(1..=1_000_000_000))]
    pub insights_min_co_buyers: u64,
    /// Sale-page event streams open at once in this process (`/api/flash/events`;
    /// past it, 503 with Retry-After).
    #[arg(long, env = "SHOP_MAX_EVENT_STREAMS",
          default_value_t = shop_web::event_streams::StreamLimits::default().total as u64,
          value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    pub max_event_streams: u64,
    /// Sale-page event streams open at once from one client address (IPv6: its
    /// /64; its /56 may hold 4 times as many, its /48 16 times).
    #[arg(long, env = "SHOP_MAX_EVENT_STREAMS_PER_ADDRESS",
          default_value_t = shop_web::event_streams::StreamLimits::default().per_address as u64,
          value_parser = clap::value_parser!(u64).range(1..=100_000))]
    pub max_event_streams_per_address: u64,
    /// Seconds an event stream lasts before the page reconnects.
    #[arg(long, env = "SHOP_EVENT_STREAM_LIFETIME",
          default_value_t = shop_web::event_streams::StreamLimits::default().lifetime.as_secs(),
          value_parser = clap::value_parser!(u64).range(1..=86_400))]
    pub event_stream_lifetime: u64,
    /// The shop is served over HTTPS: the session cookie is `__Host-shop_session`
    /// with Secure (a plain `shop_session` is not read), and answers send HSTS.
    #[arg(long, env = "SHOP_SECURE_COOKIES")]
    pub secure_cookies: bool,
}

/// `--flash-decider`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FlashDeciderArg {
    /// Redis decides; only winners reach the database.
    Redis,
    /// The database decides every attempt.
    Database,
}

impl From<FlashDeciderArg> for shop_web::flash::FlashDecider {
    fn from(arg: FlashDeciderArg) -> Self {
        match arg {
            FlashDeciderArg::Redis => Self::Redis,
            FlashDeciderArg::Database => Self::Database,
        }
    }
}

/// Where the durable state lives.
#[derive(Debug, Clone, Args, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DatabaseSettings {
    /// sqlite:PATH (made if missing, except by the commands that change what a shop holds: see docs/operations.md) or postgres://user@host/db.
    #[arg(
        long,
        global = true,
        env = "DATABASE_URL",
        hide_env_values = true,
        default_value = "sqlite:data/shop.db"
    )]
    pub database_url: SecretUrl,
}

/// The daemons' settings.
#[derive(Debug, Clone, Args, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct WorkerSettings {
    /// Most sessions kept; the cleaner removes the oldest beyond it.
    #[arg(long, env = "SHOP_SESSION_CAP", default_value_t = DEFAULT_CAP)]
    pub session_cap: u64,
    /// Most sessions the cleaner removes in one step.
    #[arg(
        long,
        env = "SHOP_CLEANER_BATCH",
        default_value_t = DEFAULT_BATCH,
        value_parser = clap::value_parser!(u32).range(1..=i64::from(MAX_BATCH)),
    )]
    pub cleaner_batch: u32,
    /// Percent of the time the cleaner may spend in its steps while it has work (it
    /// pauses between steps in proportion to how long they took; 100: no pauses).
    #[arg(
        long,
        env = "SHOP_CLEANER_DUTY",
        default_value_t = (DEFAULT_DUTY * 100.0) as u8,
        value_parser = clap::value_parser!(u8).range(1..=100),
    )]
    pub cleaner_duty: u8,
    /// Seconds a guest session (not logged in, no cart) may stay idle before the
    /// cleaner removes it, whatever the cap.
    #[arg(
        long,
        env = "SHOP_GUEST_IDLE",
        default_value_t = DEFAULT_GUEST_IDLE.as_secs(),
        value_parser = clap::value_parser!(u64).range(1..),
    )]
    pub guest_idle: u64,
    /// Seconds a session with a login or a cart may stay idle: the touch refuses
    /// it after that (a new token), and the cleaner removes it, whatever the cap.
    #[arg(
        long,
        env = "SHOP_SESSION_IDLE",
        default_value_t = session::DEFAULT_IDLE.as_secs(),
        value_parser = clap::value_parser!(u64).range(1..),
    )]
    pub session_idle: u64,
    /// Seconds a login lasts, however active its session: then the user logs in
    /// again (a stolen cookie works at most this long).
    #[arg(
        long,
        env = "SHOP_SESSION_LIFETIME",
        default_value_t = session::DEFAULT_ABSOLUTE.as_secs(),
        value_parser = clap::value_parser!(u64).range(1..),
    )]
    pub session_lifetime: u64,
    /// Seconds between view rescales (trim `viewed:` and halve every count).
    #[arg(
        long,
        env = "SHOP_RESCALE_INTERVAL",
        default_value_t = analytics::DEFAULT_INTERVAL.as_secs(),
        value_parser = clap::value_parser!(u64).range(1..),
    )]
    pub rescale_interval: u64,
    /// How many of the most viewed items a rescale keeps.
    #[arg(
        long,
        env = "SHOP_RESCALE_KEEP",
        default_value_t = analytics::DEFAULT_KEEP,
        value_parser = clap::value_parser!(u64).range(1..),
    )]
    pub rescale_keep: u64,
}

impl WorkerSettings {
    /// The session lifetimes these settings give: the cleaner enforces them, and
    /// so does every web server's touch (`serve` reads them from this section too).
    pub fn lifetimes(&self) -> session::Lifetimes {
        session::Lifetimes {
            idle: Duration::from_secs(self.session_idle),
            guest_idle: Duration::from_secs(self.guest_idle),
            absolute: Duration::from_secs(self.session_lifetime),
        }
    }
}

/// A section's compiled-in defaults: what `clap` gives its fields when neither a
/// flag nor a variable is set (the defaults are the fields' attributes; this reads
/// them, so they are written once).
pub(super) fn compiled_defaults<T: Args + FromArgMatches>() -> T {
    let cmd = T::augment_args(clap::Command::new("defaults")).mut_args(|a| a.env(None));
    let matches = cmd
        .try_get_matches_from(["defaults"])
        .expect("every setting has a default");
    T::from_arg_matches(&matches).expect("every setting has a default")
}

macro_rules! defaults_from_clap {
    ($($section:ty),*) => {$(
        impl Default for $section {
            fn default() -> Self {
                compiled_defaults()
            }
        }
    )*};
}

defaults_from_clap!(
    Settings,
    ServerSettings,
    WebSettings,
    RedisSettings,
    DatabaseSettings,
    WorkerSettings
);

impl Settings {
    /// Reads a settings file over the compiled-in defaults. Unknown sections or
    /// keys and values of the wrong type are errors naming the key and its line;
    /// ranges are checked by [`parse`](super::parse), where the file's values meet the command
    /// line's.
    pub fn from_toml(text: &str) -> Result<Self, String> {
        toml::from_str(text).map_err(|e| toml_error(text, &e))
    }
}

impl From<&WebSettings> for shop_web::WebConfig {
    fn from(web: &WebSettings) -> Self {
        Self {
            flash_limit: web.flash_limit,
            flash_decider: web.flash_decider.into(),
            flash_hold: Duration::from_secs(web.flash_hold),
            flash_buys_per_minute: web.flash_buys_per_minute,
            cart_starts_per_minute: web.cart_starts_per_address,
            uncached_per_address: web.uncached_per_address,
            counted_views_per_minute: web.counted_views_per_address,
            write_grace: Duration::from_secs(web.write_grace),
            secure_cookies: web.secure_cookies,
            max_quantity: web.max_quantity,
            page_ttl: Duration::from_secs(web.page_ttl),
            page_stale: page_cache::StaleGrace {
                while_revalidate: Duration::from_secs(web.page_stale_while_revalidate),
                if_error: Duration::from_secs(web.page_stale_if_error),
            },
            rank_limit: web.rank_limit,
            page_tier_bytes: web.page_tier_mb << 20,
            insights_min_viewers: web.insights_min_viewers,
            insights_min_co_buyers: web.insights_min_co_buyers,
            max_cart_lines: web.max_cart_lines,
            account_cart_ttl: Duration::from_secs(web.account_cart_days * 24 * 3600),
            login_limits: shop_cache::login_limit::LoginLimits {
                per_address: web.login_limit_address,
                per_name: web.login_limit_name,
                ..Default::default()
            },
            trust_forwarded_for: web.trust_forwarded_for,
            redis_budget: Duration::from_millis(web.redis_budget_ms),
            // The [edge] section's (`EdgeSettings::purger`), set by `serve`.
            edge_purger: None,
            event_streams: shop_web::event_streams::StreamLimits {
                total: web.max_event_streams as usize,
                per_address: web.max_event_streams_per_address as usize,
                lifetime: Duration::from_secs(web.event_stream_lifetime),
            },
            // The lifetimes are the [workers] section's (`WorkerSettings::lifetimes`),
            // which `serve` sets beside these.
            session_lifetimes: session::Lifetimes::default(),
            max_sessions_per_user: web.max_sessions_per_user,
            // The item on demo sale is found in the database at start (`serve`).
            demo_sale: None,
        }
    }
}
