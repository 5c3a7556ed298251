//! The `shop` binary's library half: it parses nothing and holds no logic of the
//! shop itself; it connects the layers (Redis, database, web) as the configuration
//! says and runs one subcommand. `main.rs` only parses flags and sets up logging.

pub mod commands;
pub mod config;
pub mod connect;
pub mod daemons;
pub mod flash_load;
pub mod logging;
pub mod managed_redis;
pub mod output;
pub mod server;
pub mod shutdown;

use config::{Cli, Command};

pub use connect::{connect_db, connect_redis};
pub use daemons::spawn_daemons;

/// Runs one subcommand to its end (for `serve` and `work`: until SIGINT/SIGTERM).
pub async fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Serve(args) => commands::serve::run(args).await,
        Command::Work(args) => daemons::work(args).await,
        Command::Seed(args) => commands::seed::run(args).await,
        Command::Rows(args) => commands::rows::run(args).await,
        Command::Migrate(args) => commands::migrate::run(args).await,
        Command::Sale(args) => commands::sale::run(args.command).await,
        Command::Users(args) => commands::users::run(args.command).await,
        Command::Items(args) => commands::items::run(args).await,
        Command::Load(args) => commands::load::run(args).await,
    }
}
