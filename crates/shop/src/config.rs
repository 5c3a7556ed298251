//! The shop's configuration: compiled-in defaults, overridden by `SHOP_*` (and
//! `REDIS_URL`) environment variables, overridden by flags. Validated when parsed,
//! so a bad value stops the process at start with a message naming the setting.

use clap::{Args, Parser, Subcommand};
use shop_cache::analytics;
use shop_cache::session_cleaner::{DEFAULT_BATCH, DEFAULT_CAP, MAX_BATCH};

/// The web tier of an online retailer, with its hot state in Redis.
#[derive(Debug, Parser)]
#[command(name = "shop", version, about)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the shop (with the background daemons in-process).
    Serve(ServeArgs),
    /// Run only the background daemons (session cleaner, view rescaler).
    Work(WorkArgs),
}

#[derive(Debug, Args)]
pub struct ServeArgs {
    #[command(flatten)]
    pub redis: RedisArgs,
    #[command(flatten)]
    pub workers: WorkerArgs,
}

#[derive(Debug, Args)]
pub struct WorkArgs {
    #[command(flatten)]
    pub redis: RedisArgs,
    #[command(flatten)]
    pub workers: WorkerArgs,
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
            format!("{}://***{}", &url[..scheme_end], &url[at..])
        }
        _ => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_are_redacted() {
        assert_eq!(
            redact_url("redis://user:secret@host:6379/0"),
            "redis://***@host:6379/0"
        );
        assert_eq!(redact_url("redis://:secret@host"), "redis://***@host");
        assert_eq!(redact_url("redis://host:6379"), "redis://host:6379");
        assert_eq!(redact_url("unix:///tmp/r.sock"), "unix:///tmp/r.sock");
    }

    #[test]
    fn batch_out_of_range_is_refused_with_the_setting_named() {
        let err = Cli::try_parse_from(["shop", "work", "--cleaner-batch", "0"]).unwrap_err();
        assert!(err.to_string().contains("--cleaner-batch"), "{err}");
        let err = Cli::try_parse_from(["shop", "work", "--session-cap=-1"]).unwrap_err();
        assert!(err.to_string().contains("--session-cap"), "{err}");
    }
}
