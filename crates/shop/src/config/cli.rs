//! The command line: the `shop` command, its subcommands and their arguments.
//! The settings every long-running process shares are in [`super::settings`].

use clap::{Args, Parser, Subcommand};
use shop_cache::domain::ItemId;
use shop_cache::domain::catalogue::MAX_PRICE_CENTS;
use shop_db::seed::{DEFAULT_ITEMS, DEFAULT_SEED};

use super::edge::EdgeSettings;
use super::redis::RedisSettings;
use super::settings::{DatabaseSettings, Settings, WorkerSettings};

/// The web tier of an online retailer, with its hot state in Redis.
#[derive(Debug, Parser)]
#[command(name = "shop", version, about)]
pub struct Cli {
    /// A TOML settings file: sections `[server]`, `[web]`, `[redis]`, `[database]`,
    /// `[workers]`, `[edge]`, each key a setting's flag name with `_` for `-`.
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
    /// Run only the background daemons (session cleaner, view rescaler, row
    /// refresher, flash-sale reconciler, cart takes).
    Work(WorkArgs),
    /// Fill an empty database with the demo catalogue, and the demo users with
    /// `--demo-users` (re-running changes nothing).
    Seed(SeedArgs),
    /// Manage the database row cache (`inv:<id>` in Redis).
    Rows(RowsArgs),
    /// Bring the database's schema and Redis's keys up to this version (once,
    /// after an upgrade; `serve` and `work` migrate the database themselves).
    Migrate(MigrateArgs),
    /// Manage flash sales.
    Sale(SaleArgs),
    /// Manage accounts: add one, make one an admin.
    Users(UsersArgs),
    /// Change the catalogue: add, update, retire or import items. Each change is
    /// committed, then every cached page showing it is purged before it returns.
    Items(ItemsArgs),
    /// Drive a running shop with shopper traffic and report throughput and latency.
    Load(LoadArgs),
}

/// `shop load`.
#[derive(Debug, Args)]
pub struct LoadArgs {
    /// The shop to drive: host:port, or an http:// URL of it (http://host:port/).
    #[arg(long, default_value = "127.0.0.1:8080", value_parser = shop_load::target)]
    pub target: String,
    /// Where the shop serves /metrics (its --metrics-bind), read for the page
    /// cache's counters: host:port, or the URL shop serve prints
    /// (http://host:port/metrics); default: the target's port + 1.
    #[arg(long, value_parser = shop_load::metrics_target)]
    pub metrics: Option<String>,
    /// Concurrent connections.
    #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u64).range(1..=10_000))]
    pub connections: u64,
    /// Seconds to run (default 10 unless --requests is given).
    #[arg(long)]
    pub duration: Option<f64>,
    /// Requests to send (stops at whichever of this and --duration comes first; a
    /// page view with its parts counts as one).
    #[arg(long)]
    pub requests: Option<u64>,
    /// Open loop at this many requests per second, a page view with its parts
    /// counting as one (default: closed loop).
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
    /// One kind of request only, instead of the shop's request mix: item
    /// `pageviews` as a browser makes them (the HTML, `/api/me`, and the insights
    /// where the page does not carry them),
    /// item `views` (the HTML alone), listing pages (`browse`: `/items`,
    /// `/c/{category}`, first pages and deep ones) or `search`.
    #[arg(long, value_enum)]
    pub only: Option<OnlyArg>,
    /// No progress bar.
    #[arg(long)]
    pub quiet: bool,
    /// What to run: the shop's request `mix`, or a `flash` sale: --buyers registered
    /// buyers (created and logged in first, through the database and Redis given)
    /// buy --sale-item at once, in one burst, from a sale of --stock units started
    /// just before and ended after (the buyers' accounts and orders stay: run it
    /// against a shop of tests, not a retailer's store).
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
    /// Item page views, each the HTML, `/api/me` and the insights where the page
    /// does not carry them.
    Pageviews,
    /// Item pages' HTML.
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
    /// Also add the demo accounts (alice, bob, carol), whose passwords are
    /// published: for a demo, never for a shop on the internet.
    #[arg(long, env = "SHOP_DEMO_USERS")]
    pub demo_users: bool,
    /// Database settings.
    #[command(flatten)]
    pub database: DatabaseSettings,
}

/// `shop migrate`.
#[derive(Debug, Args)]
pub struct MigrateArgs {
    /// Redis settings.
    #[command(flatten)]
    pub redis: RedisSettings,
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
    /// Database settings (`schedule` checks the item is sold).
    #[command(flatten)]
    pub database: DatabaseSettings,
}

/// The row-cache subcommands.
#[derive(Debug, Subcommand)]
pub enum RowsCommand {
    /// Cache a row, refreshed every DELAY seconds (<= 0 stops caching it).
    Schedule {
        /// The row (item id).
        id: ItemId,
        /// Refresh interval in seconds (0.1 to 86,400; 0 or less stops
        /// caching it, as `unschedule` does).
        #[arg(allow_negative_numbers = true, value_parser = row_delay)]
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
    /// Give an account a new password, read from the first line of standard
    /// input (the sign-up page's rules), and log it out everywhere: every session
    /// of the account ends (`printf '%s\n' "$PW" | shop users set-password NAME`).
    SetPassword {
        /// The account's name.
        name: String,
        /// Database settings.
        #[command(flatten)]
        database: DatabaseSettings,
        /// Redis settings (where the account's sessions are).
        #[command(flatten)]
        redis: RedisSettings,
    },
    /// Make an existing account an admin (it may open `/ops` and `/admin`).
    GrantAdmin {
        /// The account's name.
        name: String,
        /// Database settings.
        #[command(flatten)]
        database: DatabaseSettings,
    },
}

/// `shop items ...`.
#[derive(Debug, Args)]
pub struct ItemsArgs {
    /// What to do.
    #[command(subcommand)]
    pub command: ItemsCommand,
    /// Redis settings (the cached pages to purge).
    #[command(flatten)]
    pub redis: RedisSettings,
    /// Database settings.
    #[command(flatten)]
    pub database: DatabaseSettings,
    /// The edge caches a purge reaches.
    #[command(flatten)]
    pub edge: EdgeSettings,
}

/// The catalogue subcommands.
#[derive(Debug, Subcommand)]
pub enum ItemsCommand {
    /// Add an item; prints its id.
    Add {
        /// Short name (1 to 200 characters).
        #[arg(long)]
        title: String,
        /// Longer text for the item page.
        #[arg(long, default_value = "")]
        description: String,
        /// Regular price in cents (0 to 1,000,000,000).
        #[arg(long, allow_negative_numbers = true)]
        price_cents: i64,
        /// Department (1 to 100 characters, no '/').
        #[arg(long)]
        category: String,
        /// The id to give it (default: one above the highest; once the largest
        /// id is taken, the lowest free one).
        #[arg(long)]
        id: Option<ItemId>,
        /// Units in stock (0 to 1,000,000,000).
        #[arg(long, default_value_t = 0,
              value_parser = clap::value_parser!(i64).range(0..=shop_db::inventory::MAX_STOCK))]
        stock: i64,
    },
    /// Change some of an item's fields (a retired item stays retired).
    Update {
        /// The item.
        id: ItemId,
        /// A new title.
        #[arg(long)]
        title: Option<String>,
        /// A new description.
        #[arg(long)]
        description: Option<String>,
        /// A new price in cents.
        #[arg(long, allow_negative_numbers = true)]
        price_cents: Option<i64>,
        /// A new department.
        #[arg(long)]
        category: Option<String>,
        /// Change it only if it is still at this version (as printed by `add`,
        /// `update` and the admin page): a change made since refuses this one,
        /// which changes nothing. Without it, the later change wins.
        #[arg(long, value_parser = clap::value_parser!(i64).range(1..))]
        if_version: Option<i64>,
    },
    /// Change an item's units: `--add N` for units received (negative: written
    /// off), added to what is left whatever orders take meanwhile; `--set N` for
    /// a count, exactly N from now. Refused while the item's flash sale has not
    /// ended (`shop sale start` changes the sale's units) and for a retired item.
    /// Prints the units before and after.
    #[command(group(clap::ArgGroup::new("units").required(true).args(["add", "set"])))]
    Stock {
        /// The item.
        id: ItemId,
        /// Units received (negative: written off).
        #[arg(long, allow_negative_numbers = true)]
        add: Option<i64>,
        /// The units it has from now, as counted.
        #[arg(long, value_parser = clap::value_parser!(i64).range(0..=shop_db::inventory::MAX_STOCK))]
        set: Option<i64>,
    },
    /// Retire an item: kept for old orders, its page answers 410 Gone, and it
    /// leaves listings, search, the home page and the ranking.
    Remove {
        /// The item.
        id: ItemId,
    },
    /// Add or update items from a JSON Lines file (one object a line: `id`,
    /// `title`, `description`, `price_cents`, `category`, optional `stock` for a
    /// new item). Every line is checked first: a bad line is an error naming its
    /// number, and nothing is written. Only what changed is purged. A retired
    /// item a line names stays retired, as it is (the command says which),
    /// unless `--sell-retired`.
    Import {
        /// The file (`-` for standard input).
        file: std::path::PathBuf,
        /// No progress bar.
        #[arg(long)]
        quiet: bool,
        /// Sell again the retired items the file names, with its fields
        /// (without it they stay retired).
        #[arg(long)]
        sell_retired: bool,
    },
    /// Purge the cached pages of items by hand (after a change whose purge
    /// failed because Redis was down).
    Purge {
        /// The items.
        #[arg(required = true)]
        ids: Vec<ItemId>,
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
    /// are decided and the sale page's live stock comes from. The sale's units
    /// are taken from the item's; the rest are kept back and are its stock again
    /// when the sale ends.
    Start {
        /// The item.
        id: ItemId,
        /// Units on sale (0 to 1,000,000,000), taken from the item's (more than
        /// it has adds the difference).
        #[arg(long, value_parser = clap::value_parser!(i64).range(0..=shop_db::inventory::MAX_STOCK))]
        stock: i64,
        /// Sale price in cents (0 to the item's regular price).
        #[arg(long, value_parser = clap::value_parser!(i64).range(0..=MAX_PRICE_CENTS))]
        price_cents: i64,
        /// How long the sale lasts, in minutes (1 to 527,040: a year).
        #[arg(long, default_value_t = 60,
              value_parser = clap::value_parser!(i64).range(1..=shop_app::sale::MAX_MINUTES))]
        minutes: i64,
        /// How often the item's cached database row (`/api/inventory/{id}`) is
        /// refreshed, in seconds (0.1 to 86,400).
        #[arg(long, default_value_t = shop_app::sale::DEFAULT_REFRESH, value_parser = refresh_seconds)]
        refresh: f64,
        /// Redis settings.
        #[command(flatten)]
        redis: RedisSettings,
        /// Database settings.
        #[command(flatten)]
        database: DatabaseSettings,
        /// The edge caches the sale page's purge reaches.
        #[command(flatten)]
        edge: EdgeSettings,
    },
    /// End an item's sale now (running, or not begun yet): buys are refused
    /// from now, and its units left and those kept back for after it are the
    /// item's stock.
    Stop {
        /// The item.
        id: ItemId,
        /// Redis settings.
        #[command(flatten)]
        redis: RedisSettings,
        /// Database settings.
        #[command(flatten)]
        database: DatabaseSettings,
        /// The edge caches the pages' purge reaches.
        #[command(flatten)]
        edge: EdgeSettings,
    },
}

/// `--refresh`: seconds within [`shop_app::sale::REFRESH_RANGE`].
fn refresh_seconds(given: &str) -> Result<f64, String> {
    let range = shop_app::sale::REFRESH_RANGE;
    match given.trim().parse::<f64>() {
        Ok(seconds) if range.contains(&seconds) => Ok(seconds),
        _ => Err(format!(
            "give seconds from {} to {}, such as 1 or 0.5",
            range.start(),
            range.end()
        )),
    }
}

/// `rows schedule`'s delay: as `--refresh`, or 0 or less (stop caching the
/// row, the book's way).
fn row_delay(given: &str) -> Result<f64, String> {
    match given.trim().parse::<f64>() {
        Ok(seconds) if seconds <= 0.0 && seconds.is_finite() => Ok(seconds),
        _ => refresh_seconds(given).map_err(|e| format!("{e}, or 0 to stop caching the row")),
    }
}
