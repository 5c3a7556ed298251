//! `shop`: the one binary. Parses configuration, wires the libraries together and
//! runs the chosen subcommand; the logic lives in the library crates.

mod config;
mod shutdown;

use anyhow::Context;
use clap::Parser;
use redis::aio::ConnectionManager;
use std::time::Duration;

use shop_cache::analytics::Rescaler;
use shop_cache::keys::Keys;
use shop_cache::session::Sessions;
use shop_cache::session_cleaner::SessionCleaner;
use tokio_util::sync::CancellationToken;

use config::{Cli, Command, RedisArgs, WorkerArgs};

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("SHOP_LOG")
                .unwrap_or_else(|_| "info".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    match run(cli).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("shop: {error:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

async fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Serve(args) => serve(args.redis, args.workers).await,
        Command::Work(args) => work(args.redis, args.workers).await,
    }
}

/// Until the web tier lands: reports what the shop would serve from and runs the
/// daemons in-process, as `serve` will.
async fn serve(redis: RedisArgs, workers: WorkerArgs) -> anyhow::Result<()> {
    let (conn, keys) = connect(&redis).await?;
    let sessions = Sessions::new(conn.clone(), keys.clone())
        .count()
        .await
        .context("reading the session count")?;
    println!("shop {}", env!("CARGO_PKG_VERSION"));
    println!("  redis     {}", config::redact_url(&redis.redis_url));
    println!("  sessions  {sessions} (cap {})", workers.session_cap);
    println!("  web       not built yet: the HTTP shop arrives with the web issue");
    println!("  daemons   running in-process; Ctrl-C stops them");
    run_daemons(conn, keys, workers).await
}

/// Runs only the daemons, for the scaled shape (`serve --no-workers` + N workers).
async fn work(redis: RedisArgs, workers: WorkerArgs) -> anyhow::Result<()> {
    let (conn, keys) = connect(&redis).await?;
    tracing::info!(redis = %config::redact_url(&redis.redis_url), "worker connected");
    run_daemons(conn, keys, workers).await
}

async fn connect(redis: &RedisArgs) -> anyhow::Result<(ConnectionManager, Keys)> {
    let conn = shop_cache::connect(&redis.redis_url)
        .await
        .with_context(|| {
            format!(
                "cannot reach Redis at {}; start one (Debian: `apt-get install redis-server`) \
             or set REDIS_URL",
                config::redact_url(&redis.redis_url)
            )
        })?;
    Ok((conn, Keys::with_prefix(&redis.key_prefix)))
}

async fn run_daemons(
    conn: ConnectionManager,
    keys: Keys,
    workers: WorkerArgs,
) -> anyhow::Result<()> {
    let shutdown = CancellationToken::new();
    let cleaner = SessionCleaner::new(
        conn.clone(),
        keys.clone(),
        workers.session_cap,
        workers.cleaner_batch,
    )?;
    let rescaler = Rescaler::new(
        conn,
        keys,
        Duration::from_secs(workers.rescale_interval),
        workers.rescale_keep,
    );
    let mut daemons = tokio::task::JoinSet::new();
    daemons.spawn(shop_cache::daemon::run(cleaner, shutdown.clone()));
    daemons.spawn(shop_cache::daemon::run(rescaler, shutdown.clone()));

    shutdown::signal().await;
    tracing::info!("shutting down");
    shutdown.cancel();
    while let Some(result) = daemons.join_next().await {
        result.context("a daemon panicked")?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    #[test]
    fn verify_cli() {
        super::Cli::command().debug_assert();
    }
}
