//! The shop's configuration. The settings of its long-running processes are one
//! typed struct, [`Settings`], in sections (`server`, `web`, `redis`, `database`,
//! `workers`), layered: flags beat environment variables (`SHOP_*`, `REDIS_URL`,
//! `DATABASE_URL`), which beat a TOML settings file (`--config FILE`), which beats
//! the compiled-in defaults.
//!
//! Each setting is declared once, as a field of its section: its flag, variable,
//! default, range and help text are the field's `clap` attributes, and its key in
//! the file is the field's name (`serde`). The file is read with `serde` into the
//! same struct (unknown keys and wrong types are refused, naming the key); its
//! values then stand in for the compiled-in defaults, and `clap` parses the
//! command line and the environment over them, so every value, from wherever it
//! came, passes the same range checks: a bad one stops the process at start with
//! a message naming the setting. Connection URLs are [`SecretUrl`]s, which never
//! print their password.

use std::net::SocketAddr;

use clap::{Args, CommandFactory, FromArgMatches, Parser, Subcommand};
use serde::Deserialize;
use shop_cache::analytics;
use shop_cache::cart::DEFAULT_MAX_QUANTITY;
use shop_cache::domain::ItemId;
use shop_cache::page_cache;
use shop_cache::session_cleaner::{DEFAULT_BATCH, DEFAULT_CAP, DEFAULT_DUTY, MAX_BATCH};
use shop_db::flash::DEFAULT_PER_USER_LIMIT;
use shop_db::seed::{DEFAULT_ITEMS, DEFAULT_SEED};

/// The web tier of an online retailer, with its hot state in Redis.
#[derive(Debug, Parser)]
#[command(name = "shop", version, about)]
pub struct Cli {
    /// A TOML settings file: sections `[server]`, `[web]`, `[redis]`, `[database]`,
    /// `[workers]`, each key a setting's flag name with `_` for `-`.
    #[arg(long, global = true, env = "SHOP_CONFIG")]
    pub config: Option<std::path::PathBuf>,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the shop: the web server, with the background daemons in-process.
    Serve(ServeArgs),
    /// Run only the background daemons (session cleaner, view rescaler, row refresher).
    Work(WorkArgs),
    /// Fill an empty database with the demo catalogue and users (re-running changes nothing).
    Seed(SeedArgs),
    /// Manage the database row cache (`inv:<id>` in Redis).
    Rows(RowsArgs),
    /// Manage flash sales.
    Sale(SaleArgs),
    /// Manage accounts: add one, make one an admin.
    Users(UsersArgs),
    /// Drive a running shop with shopper traffic and report throughput and latency.
    Load(LoadArgs),
}

/// `shop load`.
#[derive(Debug, Args)]
pub struct LoadArgs {
    /// The shop to drive: host:port.
    #[arg(long, default_value = "127.0.0.1:8080")]
    pub target: String,
    /// Concurrent connections.
    #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u64).range(1..=10_000))]
    pub connections: u64,
    /// Seconds to run (default 10 unless --requests is given).
    #[arg(long)]
    pub duration: Option<f64>,
    /// Requests to send (stops at whichever of this and --duration comes first).
    #[arg(long)]
    pub requests: Option<u64>,
    /// Open loop at this many requests per second (default: closed loop).
    #[arg(long)]
    pub rate: Option<f64>,
    /// Items in the shop's catalogue (ids 1..=N).
    #[arg(long, default_value_t = DEFAULT_ITEMS, value_parser = clap::value_parser!(u64).range(1..))]
    pub items: u64,
    /// The Zipf exponent of item popularity.
    #[arg(long, default_value_t = 1.0)]
    pub zipf: f64,
    /// Distinct shoppers (cookie jars).
    #[arg(long, default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub shoppers: u64,
    /// Seed of the random choices.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Also write the report as JSON to this file.
    #[arg(long)]
    pub json: Option<std::path::PathBuf>,
    /// Also write an SVG of latency over time to this file.
    #[arg(long)]
    pub plot: Option<std::path::PathBuf>,
    /// Item views only (the page-cache path), instead of the shop's request mix
    /// (the same as `--only views`).
    #[arg(long, conflicts_with = "only")]
    pub views_only: bool,
    /// One kind of request only, instead of the shop's request mix: item `views`,
    /// listing pages (`browse`: `/items`, `/c/{category}`, first pages and deep
    /// ones) or `search`.
    #[arg(long, value_enum)]
    pub only: Option<OnlyArg>,
    /// No progress bar.
    #[arg(long)]
    pub quiet: bool,
    /// What to run: the shop's request `mix`, or a `flash` sale: --buyers registered
    /// buyers (created and logged in first, through the database and Redis given)
    /// buy --sale-item at once, in one burst, from a sale of --stock units started
    /// just before.
    #[arg(long, value_enum, default_value_t = Scenario::Mix)]
    pub scenario: Scenario,
    /// Flash scenario: buyers, one buy each.
    #[arg(long, default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    pub buyers: u64,
    /// Flash scenario: units on sale.
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(i64).range(0..))]
    pub stock: i64,
    /// Flash scenario: the item put on sale.
    #[arg(long, default_value = "1")]
    pub sale_item: ItemId,
    /// Flash scenario: the shop's Redis (to log the buyers in).
    #[command(flatten)]
    pub redis: RedisSettings,
    /// Flash scenario: the shop's database (to register the buyers and check the
    /// orders).
    #[command(flatten)]
    pub database: DatabaseSettings,
}

/// `shop load --scenario`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Scenario {
    /// Views, home pages, listings, searches, carts, logins, sign-ups, checkouts
    /// (see `shop_load::Mix`).
    Mix,
    /// A flash sale's opening burst.
    Flash,
}

/// `shop load --only`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum OnlyArg {
    /// Item pages.
    Views,
    /// Listing pages.
    Browse,
    /// Searches.
    Search,
}

/// `shop serve`.
#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Serve only; run the daemons in separate `shop work` processes.
    #[arg(long)]
    pub no_workers: bool,
    /// Everything else `serve` is told.
    #[command(flatten)]
    pub settings: Settings,
}

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
}

/// The HTTP server's settings (`[server]`).
#[derive(Debug, Clone, Args, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ServerSettings {
    /// Address to listen on (port 0 picks a free one).
    #[arg(long, env = "SHOP_BIND", default_value = "127.0.0.1:8080")]
    pub bind: SocketAddr,
    /// Start a private redis-server (under ./data/redis) even if one answers on the
    /// default address. Without REDIS_URL, one is started anyway when none answers.
    #[arg(long, env = "SHOP_MANAGED_REDIS")]
    pub managed_redis: bool,
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
    /// Seconds the database may fail writes before `/healthz` answers 503
    /// (`"database": "read_only"`) so load balancers take this server out; shorter
    /// failures (a lock held for a moment) answer 200 `"degraded"`.
    #[arg(long, env = "SHOP_WRITE_GRACE", default_value_t = shop_web::health::DEFAULT_WRITE_GRACE.as_secs(),
          value_parser = clap::value_parser!(u64).range(0..=3_600))]
    pub write_grace: u64,
    /// Start a demo flash sale (item 1, 100 units at half price, 24 hours) when no
    /// sale is running or coming, so a new shop's sale page has something live.
    #[arg(long, env = "SHOP_DEMO_SALE", default_value_t = true, action = clap::ArgAction::Set)]
    pub demo_sale: bool,
    /// Most of one item a cart line may hold.
    #[arg(long, env = "SHOP_MAX_QUANTITY", default_value_t = DEFAULT_MAX_QUANTITY,
          value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub max_quantity: u32,
    /// Most lines (different items) a cart may hold.
    #[arg(long, env = "SHOP_MAX_CART_LINES", default_value_t = shop_cache::cart::DEFAULT_MAX_LINES,
          value_parser = clap::value_parser!(u32).range(1..=1_000))]
    pub max_cart_lines: u32,
    /// Login attempts one client address may make per minute.
    #[arg(long, env = "SHOP_LOGIN_LIMIT_ADDRESS",
          default_value_t = shop_cache::login_limit::LoginLimits::default().per_address,
          value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub login_limit_address: u32,
    /// Login attempts on one account name per minute, from all addresses.
    #[arg(long, env = "SHOP_LOGIN_LIMIT_NAME",
          default_value_t = shop_cache::login_limit::LoginLimits::default().per_name,
          value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub login_limit_name: u32,
    /// The shop is behind a reverse proxy that appends the client's address to
    /// X-Forwarded-For: count login attempts per that address (its last entry).
    #[arg(long, env = "SHOP_TRUST_FORWARDED_FOR")]
    pub trust_forwarded_for: bool,
    /// Seconds a cached page is kept.
    #[arg(long, env = "SHOP_PAGE_TTL", default_value_t = page_cache::DEFAULT_TTL.as_secs(),
          value_parser = clap::value_parser!(u64).range(1..=86_400))]
    pub page_ttl: u64,
    /// Only items ranked below this in views have their pages cached.
    #[arg(long, env = "SHOP_RANK_LIMIT", default_value_t = page_cache::DEFAULT_RANK_LIMIT)]
    pub rank_limit: u64,
    /// Mark the session cookie Secure (when the shop is served over HTTPS).
    #[arg(long, env = "SHOP_SECURE_COOKIES")]
    pub secure_cookies: bool,
}

/// `shop work`.
#[derive(Debug, Args)]
pub struct WorkArgs {
    /// Redis settings.
    #[command(flatten)]
    pub redis: RedisSettings,
    /// Database settings.
    #[command(flatten)]
    pub database: DatabaseSettings,
    /// Daemon settings.
    #[command(flatten)]
    pub workers: WorkerSettings,
}

/// `shop seed`.
#[derive(Debug, Args)]
pub struct SeedArgs {
    /// How many items the catalogue has (ids 1..=N).
    #[arg(long, env = "SHOP_SEED_ITEMS", default_value_t = DEFAULT_ITEMS,
          value_parser = clap::value_parser!(u64).range(1..=10_000_000))]
    pub items: u64,
    /// The seed of the generated catalogue: the same seed, the same items.
    #[arg(long, default_value_t = DEFAULT_SEED)]
    pub seed: u64,
    /// Database settings.
    #[command(flatten)]
    pub database: DatabaseSettings,
}

/// `shop rows ...`.
#[derive(Debug, Args)]
pub struct RowsArgs {
    /// What to do with the row cache.
    #[command(subcommand)]
    pub command: RowsCommand,
    /// Redis settings.
    #[command(flatten)]
    pub redis: RedisSettings,
}

/// The row-cache subcommands.
#[derive(Debug, Subcommand)]
pub enum RowsCommand {
    /// Cache a row, refreshed every DELAY seconds (<= 0 stops caching it).
    Schedule {
        /// The row (item id).
        id: ItemId,
        /// Refresh interval in seconds.
        #[arg(allow_negative_numbers = true)]
        delay: f64,
    },
    /// Stop caching a row (its copy goes at the next refresher step).
    Unschedule {
        /// The row (item id).
        id: ItemId,
    },
    /// List the scheduled rows.
    List,
}

/// `shop users ...`.
#[derive(Debug, Args)]
pub struct UsersArgs {
    /// What to do.
    #[command(subcommand)]
    pub command: UsersCommand,
}

/// The account subcommands.
#[derive(Debug, Subcommand)]
pub enum UsersCommand {
    /// Add an account (the sign-up page's rules), reading its password from the
    /// first line of standard input, so it never shows in the process list or the
    /// shell's history: `printf '%s\n' "$PW" | shop users add NAME`.
    Add {
        /// The account's name.
        name: String,
        /// Make it an admin too.
        #[arg(long)]
        admin: bool,
        /// Database settings.
        #[command(flatten)]
        database: DatabaseSettings,
    },
    /// Make an existing account an admin (it may open `/ops`).
    GrantAdmin {
        /// The account's name.
        name: String,
        /// Database settings.
        #[command(flatten)]
        database: DatabaseSettings,
    },
}

/// `shop sale ...`.
#[derive(Debug, Args)]
pub struct SaleArgs {
    /// What to do.
    #[command(subcommand)]
    pub command: SaleCommand,
}

/// The sale subcommands.
#[derive(Debug, Subcommand)]
pub enum SaleCommand {
    /// Put an item on sale now: its stock in the database and in Redis, where buys
    /// are decided and the sale page's live stock comes from.
    Start {
        /// The item.
        id: ItemId,
        /// Units on sale.
        #[arg(long, value_parser = clap::value_parser!(i64).range(0..))]
        stock: i64,
        /// Sale price in cents.
        #[arg(long, value_parser = clap::value_parser!(i64).range(0..))]
        price_cents: i64,
        /// How long the sale lasts, in minutes.
        #[arg(long, default_value_t = 60, value_parser = clap::value_parser!(i64).range(1..))]
        minutes: i64,
        /// How often the item's cached database row (`/api/inventory/{id}`) is
        /// refreshed, in seconds.
        #[arg(long, default_value_t = crate::sale::DEFAULT_REFRESH)]
        refresh: f64,
        /// Redis settings.
        #[command(flatten)]
        redis: RedisSettings,
        /// Database settings.
        #[command(flatten)]
        database: DatabaseSettings,
    },
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

/// Where the hot state lives.
#[derive(Debug, Clone, Args, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RedisSettings {
    /// Redis to use: redis://host:port/db or unix:///path/to/socket
    /// [default: redis://127.0.0.1:6379; `serve` starts a private one if none answers].
    #[arg(long, env = "REDIS_URL")]
    pub redis_url: Option<SecretUrl>,
    /// A Redis Cluster to use instead: some of its nodes as host:port,host:port,...
    /// Selects the cluster key layout (hash-tagged keys, a sharded session index).
    #[arg(
        long,
        env = "SHOP_REDIS_CLUSTER",
        value_delimiter = ',',
        conflicts_with = "redis_url",
        value_parser = parse_seed
    )]
    pub redis_cluster: Vec<String>,
    /// How many shards the cluster layout splits the session index into.
    #[arg(
        long,
        env = "SHOP_SESSION_SHARDS",
        default_value_t = shop_cache::keys::DEFAULT_SHARDS,
        value_parser = clap::value_parser!(u32).range(1..=i64::from(shop_cache::keys::MAX_SHARDS)),
    )]
    pub session_shards: u32,
    /// Namespace put before every key, so several shops can share one Redis.
    #[arg(long, env = "SHOP_KEY_PREFIX", default_value = "")]
    pub key_prefix: String,
    /// Connections to one Redis node, used in turn (not for a cluster).
    #[arg(
        long,
        env = "SHOP_REDIS_POOL",
        default_value_t = shop_cache::connection::DEFAULT_POOL as u8,
        value_parser = clap::value_parser!(u8).range(1..=64),
    )]
    pub redis_pool: u8,
}

/// One cluster node, `host:port` (or a `redis://` URL).
fn parse_seed(s: &str) -> Result<String, String> {
    let s = s.trim();
    let addr = s.strip_prefix("redis://").unwrap_or(s);
    match addr.rsplit_once(':') {
        Some((host, port)) if !host.is_empty() && port.parse::<u16>().is_ok_and(|p| p > 0) => {
            Ok(s.to_owned())
        }
        _ => Err(format!("`{s}` is not host:port")),
    }
}

/// Where the durable state lives.
#[derive(Debug, Clone, Args, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DatabaseSettings {
    /// sqlite:PATH (created if missing) or postgres://user@host/db.
    #[arg(long, env = "DATABASE_URL", default_value = "sqlite:data/shop.db")]
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

/// Where Redis is when no URL is configured.
pub const DEFAULT_REDIS_URL: &str = "redis://127.0.0.1:6379";

impl RedisSettings {
    /// The configured URL, or the default address.
    pub fn url(&self) -> &str {
        self.redis_url
            .as_ref()
            .map_or(DEFAULT_REDIS_URL, SecretUrl::expose)
    }

    /// True when a cluster is configured.
    pub fn is_cluster(&self) -> bool {
        !self.redis_cluster.is_empty()
    }

    /// Where Redis is, for logs (no password).
    pub fn describe(&self) -> String {
        if self.is_cluster() {
            format!("cluster {}", redact_url(&self.redis_cluster.join(",")))
        } else {
            redact_url(self.url())
        }
    }

    /// The key layout: the book's for one node, hash-tagged for a cluster.
    pub fn keys(&self) -> shop_cache::keys::Keys {
        let layout = if self.is_cluster() {
            shop_cache::keys::Layout::Cluster {
                shards: self.session_shards,
            }
        } else {
            shop_cache::keys::Layout::Book
        };
        shop_cache::keys::Keys::new(&self.key_prefix, layout)
            .expect("the shard count is checked when parsed")
    }
}

/// A section's compiled-in defaults: what `clap` gives its fields when neither a
/// flag nor a variable is set (the defaults are the fields' attributes; this reads
/// them, so they are written once).
fn compiled_defaults<T: Args + FromArgMatches>() -> T {
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
    /// ranges are checked by [`parse`], where the file's values meet the command
    /// line's.
    pub fn from_toml(text: &str) -> Result<Self, String> {
        toml::from_str(text).map_err(|e| toml_error(text, &e))
    }
}

/// Parses the command line, with the settings file named by `--config FILE` (or
/// `SHOP_CONFIG`) under it: flags beat the environment, which beats the file,
/// which beats the compiled-in defaults (see the module doc).
pub fn parse(args: Vec<String>) -> Result<Cli, clap::Error> {
    let mut cmd = Cli::command();
    if let Some(path) = config_file_path(&args) {
        let values = read_config_file(&path)
            .map_err(|message| cmd.error(clap::error::ErrorKind::InvalidValue, message))?;
        cmd = with_defaults(cmd, &values);
    }
    let matches = cmd.try_get_matches_from(args)?;
    Cli::from_arg_matches(&matches)
}

fn config_file_path(args: &[String]) -> Option<String> {
    let flag = args.iter().enumerate().find_map(|(i, a)| {
        if a == "--config" {
            args.get(i + 1).cloned()
        } else {
            a.strip_prefix("--config=").map(str::to_owned)
        }
    });
    flag.or_else(|| std::env::var("SHOP_CONFIG").ok())
}

/// The file's settings, as each field's name and its values in command-line form,
/// once the file has been read into [`Settings`] (so its keys and types are right).
fn read_config_file(path: &str) -> Result<Vec<(String, Vec<String>)>, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read config file {path}: {e}"))?;
    Settings::from_toml(&text).map_err(|e| format!("{path}: {e}"))?;
    let table: toml::Table =
        toml::from_str(&text).map_err(|e| format!("{path}: {}", toml_error(&text, &e)))?;
    let mut values = Vec::new();
    for (_, section) in table {
        let toml::Value::Table(section) = section else {
            unreachable!("Settings refuses keys outside its sections");
        };
        for (key, value) in section {
            let value = match value {
                toml::Value::Array(list) => list.iter().map(flag_form).collect(),
                one => vec![flag_form(&one)],
            };
            values.push((key, value));
        }
    }
    Ok(values)
}

/// A TOML error as its line number and message, without the quoted line the
/// `toml` crate would print: that line may hold a password (a misspelt
/// `database_url = "postgres://shop:secret@..."`).
fn toml_error(text: &str, error: &toml::de::Error) -> String {
    match error.span() {
        Some(span) => {
            let before = &text[..span.start.min(text.len())];
            let line = before.matches('\n').count() + 1;
            let start = before.rfind('\n').map_or(0, |i| i + 1);
            let key = text[start..]
                .lines()
                .next()
                .and_then(|l| l.split_once('='))
                .map(|(key, _)| format!(" (`{}`)", key.trim()))
                .unwrap_or_default();
            format!("line {line}{key}: {}", error.message())
        }
        None => error.message().to_owned(),
    }
}

/// A TOML value as it would be written after its flag.
fn flag_form(value: &toml::Value) -> String {
    match value {
        toml::Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// Makes each file value the default of the arguments of that name (a settings
/// field's argument is named after the field), in every subcommand.
fn with_defaults(mut cmd: clap::Command, values: &[(String, Vec<String>)]) -> clap::Command {
    let ids: Vec<(String, Vec<String>)> = cmd
        .get_arguments()
        .filter_map(|a| {
            let (_, value) = values.iter().find(|(k, _)| a.get_id() == k.as_str())?;
            Some((a.get_id().to_string(), value.clone()))
        })
        .collect();
    for (id, value) in ids {
        cmd = cmd.mut_arg(id, |a| a.default_values(value));
    }
    let subs: Vec<String> = cmd
        .get_subcommands()
        .map(|s| s.get_name().to_owned())
        .collect();
    for name in subs {
        cmd = cmd.mut_subcommand(name, |s| with_defaults(s, values));
    }
    cmd
}

/// A connection URL that may hold a password (`--redis-url`, `--database-url`).
/// Printed (`Debug`, `Display`) with the password replaced, so a configuration
/// that is logged or shown in an error never carries it: the type redacts, not
/// each caller. [`SecretUrl::expose`] gives the real URL, to connect with.
#[derive(Clone, PartialEq, Eq)]
pub struct SecretUrl(String);

impl SecretUrl {
    /// The URL as given, password included. Only for connecting.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl<'de> Deserialize<'de> for SecretUrl {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        String::deserialize(deserializer).map(Self)
    }
}

impl std::str::FromStr for SecretUrl {
    type Err = std::convert::Infallible;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(Self(s.to_owned()))
    }
}

impl std::fmt::Display for SecretUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&redact_url(&self.0))
    }
}

impl std::fmt::Debug for SecretUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SecretUrl({:?})", redact_url(&self.0))
    }
}

/// The URL with any password replaced, for printing and logs.
pub fn redact_url(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme_end), Some(at)) if at > scheme_end => {
            let user_end = url[scheme_end + 3..at]
                .find(':')
                .map(|i| scheme_end + 3 + i);
            match user_end {
                Some(colon) => format!("{}:***{}", &url[..colon], &url[at..]),
                None => url.to_owned(),
            }
        }
        _ => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verify_cli() {
        Cli::command().debug_assert();
    }

    #[test]
    fn passwords_are_redacted() {
        assert_eq!(
            redact_url("redis://user:secret@host:6379/0"),
            "redis://user:***@host:6379/0"
        );
        assert_eq!(redact_url("redis://:secret@host"), "redis://:***@host");
        assert_eq!(
            redact_url("postgres://postgres@127.0.0.1/shop"),
            "postgres://postgres@127.0.0.1/shop"
        );
        assert_eq!(redact_url("redis://host:6379"), "redis://host:6379");
        assert_eq!(redact_url("unix:///tmp/r.sock"), "unix:///tmp/r.sock");
    }

    #[test]
    fn urls_from_the_command_line_print_without_their_password() {
        let cli = Cli::try_parse_from([
            "shop",
            "serve",
            "--redis-url",
            "redis://u:hunter2@h:6379",
            "--database-url",
            "postgres://shop:s3cret@db/shop",
        ])
        .unwrap();
        let everything = format!("{cli:?}");
        assert!(!everything.contains("hunter2"), "{everything}");
        assert!(!everything.contains("s3cret"), "{everything}");
        assert!(everything.contains("redis://u:***@h:6379"), "{everything}");
        let Command::Serve(serve) = cli.command else {
            panic!("serve");
        };
        assert_eq!(
            serve.settings.database.database_url.expose(),
            "postgres://shop:s3cret@db/shop"
        );
        assert_eq!(
            serve.settings.database.database_url.to_string(),
            "postgres://shop:***@db/shop"
        );
    }

    #[test]
    fn bad_values_are_refused_with_the_setting_named() {
        for (args, setting) in [
            (
                vec!["shop", "work", "--cleaner-batch", "0"],
                "--cleaner-batch",
            ),
            (vec!["shop", "work", "--session-cap=-1"], "--session-cap"),
            (
                vec!["shop", "work", "--cleaner-duty", "0"],
                "--cleaner-duty",
            ),
            (
                vec!["shop", "work", "--cleaner-duty", "101"],
                "--cleaner-duty",
            ),
            (vec!["shop", "serve", "--redis-pool", "0"], "--redis-pool"),
            (vec!["shop", "serve", "--redis-pool", "65"], "--redis-pool"),
            (vec!["shop", "serve", "--bind", "nowhere"], "--bind"),
            (vec!["shop", "seed", "--items", "0"], "--items"),
            (vec!["shop", "rows", "schedule", "abc", "1"], "<ID>"),
        ] {
            let err = Cli::try_parse_from(&args).unwrap_err().to_string();
            assert!(err.contains(setting), "{args:?}: {err}");
        }
    }

    fn args(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    /// A settings file in a directory of its own, removed when dropped.
    struct ConfigFile(tempfile::TempDir);

    impl ConfigFile {
        fn new() -> Self {
            Self(tempfile::tempdir().unwrap())
        }

        fn write(&self, text: &str) -> String {
            let file = self.0.path().join("shop.toml");
            std::fs::write(&file, text).unwrap();
            file.display().to_string()
        }
    }

    #[test]
    fn a_config_file_sets_defaults_that_flags_override() {
        let file = ConfigFile::new();
        let path = file.write(
            "# a comment\n[workers]\nsession_cap = 1234\ncleaner_batch = 7\n\n\
             [database]\ndatabase_url = \"sqlite:x.db\"\n\
             [redis]\nredis_cluster = [\"127.0.0.1:7000\", \"127.0.0.1:7001\"]\n",
        );
        let cli = parse(args(&[
            "shop",
            "work",
            "--config",
            &path,
            "--cleaner-batch",
            "9",
        ]))
        .unwrap();
        let Command::Work(work) = cli.command else {
            panic!("not work")
        };
        assert_eq!(work.workers.session_cap, 1234, "from the file");
        assert_eq!(work.workers.cleaner_batch, 9, "the flag wins");
        assert_eq!(work.workers.cleaner_duty, 10, "the compiled-in default");
        assert_eq!(work.database.database_url.expose(), "sqlite:x.db");
        assert_eq!(
            work.redis.redis_cluster,
            ["127.0.0.1:7000", "127.0.0.1:7001"]
        );

        let path = file.write(
            "[server]\nbind = \"0.0.0.0:9000\"\n[web]\nsecure_cookies = true\ndemo_sale = false\n\
             flash_decider = \"database\"\n",
        );
        let cli = parse(args(&["shop", "serve", "--config", &path])).unwrap();
        let Command::Serve(serve) = cli.command else {
            panic!("not serve")
        };
        let Settings { server, web, .. } = serve.settings;
        assert_eq!(server.bind.to_string(), "0.0.0.0:9000");
        assert!(web.secure_cookies, "a switch turned on by the file");
        assert!(!web.demo_sale, "a default turned off by the file");
        assert_eq!(web.flash_decider, FlashDeciderArg::Database);
    }

    #[test]
    fn a_config_file_is_checked_as_the_command_line_is() {
        let file = ConfigFile::new();
        for (text, says) in [
            ("[workers]\ncleaner_batch = 0\n", "--cleaner-batch"),
            ("[server]\nbind = \"nowhere\"\n", "bind"),
            ("[workers]\nsession_cap = \"many\"\n", "session_cap"),
            ("[workers]\nno_such = 1\n", "unknown field `no_such`"),
            ("[nowhere]\nx = 1\n", "unknown field `nowhere`"),
            ("session_cap = 1\n", "unknown field `session_cap`"),
            ("not a setting\n", "line 1: "),
        ] {
            let path = file.write(text);
            let err = parse(args(&["shop", "work", "--config", &path]))
                .unwrap_err()
                .to_string();
            assert!(err.contains(says), "{text:?}: {err}");
        }
        let err = parse(args(&[
            "shop",
            "work",
            "--config",
            "/nonexistent/shop.toml",
        ]))
        .unwrap_err()
        .to_string();
        assert!(err.contains("cannot read config file"), "{err}");
    }

    #[test]
    fn the_defaults_are_the_flags_defaults() {
        let settings = Settings::default();
        assert_eq!(settings.workers.session_cap, DEFAULT_CAP);
        assert_eq!(settings.web.page_ttl, page_cache::DEFAULT_TTL.as_secs());
        assert_eq!(settings.server.bind.to_string(), "127.0.0.1:8080");
        assert_eq!(
            settings.database.database_url.expose(),
            "sqlite:data/shop.db"
        );
        assert!(settings.redis.redis_url.is_none());
        let partial = Settings::from_toml("[web]\nrank_limit = 3\n").unwrap();
        assert_eq!(partial.web.rank_limit, 3);
        assert_eq!(
            partial.web.page_ttl, settings.web.page_ttl,
            "the rest defaulted"
        );
    }

    #[test]
    fn a_negative_delay_is_a_value_not_a_flag() {
        let cli = Cli::try_parse_from(["shop", "rows", "schedule", "5", "-1"]).unwrap();
        let Command::Rows(RowsArgs {
            command: RowsCommand::Schedule { delay, .. },
            ..
        }) = cli.command
        else {
            panic!("parsed as something else");
        };
        assert_eq!(delay, -1.0);
    }
}
