//! The background daemons every worker runs (`shop serve` in-process, or `shop
//! work` alone), and `shop work` itself.

use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

use anyhow::Context;
use shop_cache::RedisConn;
use shop_cache::analytics::Rescaler;
use shop_cache::flash_sale::{FlashSales, Reconciler, ReconcilerTotals};
use shop_cache::keys::Keys;
use shop_cache::row_cache::Refresher;
use shop_cache::session_cleaner::SessionCleaner;
use shop_db::Db;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::config::{WorkArgs, WorkerSettings};
use crate::connect::{connect_db, connect_redis};
use crate::shutdown;
use shop_app::rows::row_source;
use shop_app::sale;

/// Starts every daemon on `set`, each stopping when `shutdown` is cancelled.
/// Returns the session cleaner's removal counter, for metrics.
pub fn spawn_daemons(
    set: &mut JoinSet<()>,
    conn: &RedisConn,
    keys: &Keys,
    db: &Db,
    workers: &WorkerSettings,
    shutdown: &CancellationToken,
) -> anyhow::Result<DaemonCounters> {
    let cleaner = SessionCleaner::new(
        conn.clone(),
        keys.clone(),
        workers.session_cap,
        workers.cleaner_batch,
    )?
    .with_duty(f64::from(workers.cleaner_duty) / 100.0)?
    .with_lifetimes(workers.lifetimes());
    let rescaler = Rescaler::new(
        conn.clone(),
        keys.clone(),
        Duration::from_secs(workers.rescale_interval),
        workers.rescale_keep,
    );
    let refresher = Refresher::new(conn.clone(), keys.clone(), row_source(db.clone()));
    let reconciler = Reconciler::new(
        FlashSales::new(conn.clone(), keys.clone()),
        sale::DbLedger(db.clone()),
    );
    // Takes only: the quantity cap is never consulted.
    let carts = shop_cache::cart::Carts::new(
        conn.clone(),
        keys.clone(),
        shop_cache::cart::DEFAULT_MAX_QUANTITY,
    );
    let cart_takes = shop_app::orders::CartTakes::new(db.clone(), carts);
    let counters = DaemonCounters {
        removed: cleaner.removed_counter(),
        reconciled: reconciler.totals(),
    };
    set.spawn(shop_cache::daemon::run(cleaner, shutdown.clone()));
    set.spawn(shop_cache::daemon::run(rescaler, shutdown.clone()));
    set.spawn(shop_cache::daemon::run(refresher, shutdown.clone()));
    set.spawn(shop_cache::daemon::run(reconciler, shutdown.clone()));
    set.spawn(shop_cache::daemon::run(cart_takes, shutdown.clone()));
    Ok(counters)
}

/// The daemons' running counts, for `/metrics`.
pub struct DaemonCounters {
    /// Sessions the cleaner removed.
    pub removed: Arc<AtomicU64>,
    /// What the flash-sale reconciler settled, corrected and reloaded.
    pub reconciled: Arc<ReconcilerTotals>,
}

/// Waits for every daemon on the set to stop; an error if one panicked.
pub async fn join_all(mut daemons: JoinSet<()>) -> anyhow::Result<()> {
    while let Some(result) = daemons.join_next().await {
        result.context("a daemon panicked")?;
    }
    Ok(())
}

/// Runs `shop work`: the daemons alone, until SIGINT/SIGTERM.
pub async fn work(args: WorkArgs) -> anyhow::Result<()> {
    let stop = shutdown::listen();
    let (conn, keys) = connect_redis(&args.redis).await?;
    let db = connect_db(&args.database).await?;
    tracing::info!(redis = %args.redis.describe(), "worker connected");
    let shutdown = CancellationToken::new();
    let mut daemons = JoinSet::new();
    spawn_daemons(&mut daemons, &conn, &keys, &db, &args.workers, &shutdown)?;
    stop.await;
    tracing::info!("shutting down");
    shutdown.cancel();
    join_all(daemons).await
}
