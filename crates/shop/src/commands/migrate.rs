//! `shop migrate`: the one-time changes an upgrade needs, run once by an operator
//! rather than by every worker at every start.
//!
//! The database's migrations (`shop_db`, run at every connect anyway), then the
//! Redis key migrations: today, removing the shopper-insight counts of the old
//! layout that never expired (`viewers:<item>` and `buyers:<item>` without a week;
//! the counts are per week now and expire by themselves).

use shop_cache::insights::Insights;

use crate::config::MigrateArgs;
use crate::connect::{connect_db, connect_redis};

/// Runs `shop migrate`.
pub async fn run(args: MigrateArgs) -> anyhow::Result<()> {
    connect_db(&args.database).await?.close().await;
    println!("database: migrated");
    let (conn, keys) = connect_redis(&args.redis).await?;
    let removed = Insights::new(conn, keys).remove_unwindowed_counts().await?;
    println!("redis: removed {removed} insight counts of the old, unexpiring layout");
    Ok(())
}
