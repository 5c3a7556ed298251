//! `shop migrate`: the one-time changes an upgrade needs, run once by an operator
//! rather than by every worker at every start.
//!
//! The database's migrations (`shop_db`, run at every connect anyway), then the
//! Redis key migrations: removing the shopper-insight counts of the old layout
//! that never expired (`viewers:<item>` and `buyers:<item>` without a week; the
//! counts are per week now and expire by themselves) and the marks of the
//! also-bought decay before forward decay (`also-epoch:`, `also-index:`, ...), listing the
//! sessions not logged in of before they were tracked, in `guests:` or, holding a
//! cart, in `anonymous:` (so they expire and are cleaned before logged-in
//! shoppers, as new ones are), and listing the logged-in
//! sessions of before each user's list of sessions (`user-sessions:<user>`), so
//! "log out everywhere", a password change and the cap reach them too, and
//! merging the carts of sessions logged in before carts were the accounts' into
//! their users' carts (once each). Run it
//! once every web server and `shop work` runs the new build (an older one logs
//! in without listing, and an older `shop work` would go on halving the new
//! also-bought lists and write the old decay's keys again).

use shop_cache::cart::Carts;
use shop_cache::insights::Insights;
use shop_cache::session::Sessions;

use crate::config::MigrateArgs;
use crate::connect::{connect_db, connect_redis};

/// Runs `shop migrate`.
pub async fn run(args: MigrateArgs) -> anyhow::Result<()> {
    connect_db(&args.database).await?.close().await;
    crate::say!("database: migrated");
    let (conn, keys) = connect_redis(&args.redis).await?;
    let insights = Insights::new(conn.clone(), keys.clone());
    let removed = insights.remove_unwindowed_counts().await?;
    crate::say!("redis: removed {removed} insight counts of the old, unexpiring layout");
    let removed = insights.remove_old_also_bought_decay().await?;
    crate::say!("redis: removed {removed} keys of the old also-bought decay");
    let carts = Carts::new(
        conn.clone(),
        keys.clone(),
        shop_cache::cart::DEFAULT_MAX_QUANTITY,
    );
    let merged = carts.move_logged_in_carts().await?;
    crate::say!(
        "redis: merged the carts of {merged} logged-in sessions into their accounts' carts"
    );
    let sessions = Sessions::new(conn, keys);
    let listed = sessions.index_guests().await?;
    crate::say!("redis: listed {listed} sessions not logged in in guests: or anonymous:");
    let listed = sessions.index_logins().await?;
    crate::say!("redis: listed {listed} logged-in sessions in their users' lists of sessions");
    Ok(())
}
