//! The shop's configuration: compiled-in defaults, overridden by `SHOP_*` (and
//! `REDIS_URL`, `DATABASE_URL`) environment variables, overridden by flags.
//! Validated when parsed, so a bad value stops the process at start with a message
//! naming the setting.

use std::net::SocketAddr;

use clap::{Args, Parser, Subcommand};
use shop_cache::analytics;
use shop_cache::domain::ItemId;
use shop_cache::session_cleaner::{DEFAULT_BATCH, DEFAULT_CAP, MAX_BATCH};
use shop_db::flash::DEFAULT_PER_USER_LIMIT;
use shop_db::seed::{DEFAULT_ITEMS, DEFAULT_SEED};

/// The web tier of an online retailer, with its hot state in Redis.
#[derive(Debug, Parser)]
#[command(name = "shop", version, about)]
pub struct Cli {
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
}

/// `shop serve`.
#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Address to listen on (port 0 picks a free one).
    #[arg(long, env = "SHOP_BIND", default_value = "127.0.0.1:8080")]
    pub bind: SocketAddr,
    /// Serve only; run the daemons in separate `shop work` processes.
    #[arg(long)]
    pub no_workers: bool,
    /// Most units of one sale item a user may buy.
    #[arg(long, env = "SHOP_FLASH_LIMIT", default_value_t = DEFAULT_PER_USER_LIMIT,
          value_parser = clap::value_parser!(i64).range(1..))]
    pub flash_limit: i64,
    /// Redis settings.
    #[command(flatten)]
    pub redis: RedisArgs,
    /// Database settings.
    #[command(flatten)]
    pub database: DatabaseArgs,
    /// Daemon settings.
    #[command(flatten)]
    pub workers: WorkerArgs,
}

/// `shop work`.
#[derive(Debug, Args)]
pub struct WorkArgs {
    /// Redis settings.
    #[command(flatten)]
    pub redis: RedisArgs,
    /// Database settings.
    #[command(flatten)]
    pub database: DatabaseArgs,
    /// Daemon settings.
    #[command(flatten)]
    pub workers: WorkerArgs,
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
    pub database: DatabaseArgs,
}

/// `shop rows ...`.
#[derive(Debug, Args)]
pub struct RowsArgs {
    /// What to do with the row cache.
    #[command(subcommand)]
    pub command: RowsCommand,
    /// Redis settings.
    #[command(flatten)]
    pub redis: RedisArgs,
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
    /// Put an item on sale now, and cache its row so the sale page shows live stock.
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
        /// How often the sale page's stock is refreshed from the database, in seconds.
        #[arg(long, default_value_t = 1.0)]
        refresh: f64,
        /// Redis settings.
        #[command(flatten)]
        redis: RedisArgs,
        /// Database settings.
        #[command(flatten)]
        database: DatabaseArgs,
    },
}

/// Where the hot state lives.
#[derive(Debug, Clone, Args)]
pub struct RedisArgs {
    /// Redis to use: redis://host:port/db or unix:///path/to/socket.
    #[arg(long, env = "REDIS_URL", default_value = "redis://127.0.0.1:6379")]
    pub redis_url: String,
    /// Namespace put before every key, so several shops can share one Redis.
    #[arg(long, env = "SHOP_KEY_PREFIX", default_value = "")]
    pub key_prefix: String,
}

/// Where the durable state lives.
#[derive(Debug, Clone, Args)]
pub struct DatabaseArgs {
    /// sqlite:PATH (created if missing) or postgres://user@host/db.
    #[arg(long, env = "DATABASE_URL", default_value = "sqlite:data/shop.db")]
    pub database_url: String,
}

/// The daemons' settings.
#[derive(Debug, Clone, Args)]
pub struct WorkerArgs {
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
    use clap::CommandFactory;

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
    fn bad_values_are_refused_with_the_setting_named() {
        for (args, setting) in [
            (
                vec!["shop", "work", "--cleaner-batch", "0"],
                "--cleaner-batch",
            ),
            (vec!["shop", "work", "--session-cap=-1"], "--session-cap"),
            (vec!["shop", "serve", "--bind", "nowhere"], "--bind"),
            (vec!["shop", "seed", "--items", "0"], "--items"),
            (vec!["shop", "rows", "schedule", "abc", "1"], "<ID>"),
        ] {
            let err = Cli::try_parse_from(&args).unwrap_err().to_string();
            assert!(err.contains(setting), "{args:?}: {err}");
        }
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
