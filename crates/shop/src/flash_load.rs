//! `shop load --scenario flash`: a flash sale's opening burst against a running
//! shop, and the check of what it sold.
//!
//! Set-up (not timed): `--buyers` users are registered in the shop's database
//! (sharing one password, hashed once) and logged in through the shop's session
//! layer in its Redis, the way `POST /login` does after checking the password; a
//! sale of `--stock` units of `--sale-item` is started as `shop sale start` starts
//! one. Logging the buyers in over HTTP would time ten thousand argon2 runs and the
//! login rate limits, not the sale. Then every buyer sends one buy at once
//! ([`shop_load::flash`]), and the database is asked how many units were ordered:
//! the run fails if that is more than the stock (oversold), fewer than the stock
//! with buyers to spare (units lost), or if any buy got a 5xx. The sale ends
//! with the run (the buyers' accounts and orders stay: run it against a shop of
//! tests, not a retailer's store).

use std::time::Instant;

use anyhow::Context;
use futures::StreamExt;
use shop_cache::session::{SessionToken, Sessions};
use shop_db::inventory::Sale;
use shop_load::flash::{FlashLoad, FlashReport};

use crate::config::LoadArgs;
use shop_app::sale;

/// Logins running at once while the buyers are prepared.
const LOGINS_AT_ONCE: usize = 64;

/// What the run sold, by the database.
#[derive(Debug, serde::Serialize)]
struct Check {
    stock: i64,
    orders: i64,
    oversold: i64,
    database_stock_left: i64,
    redis_stock_left: Option<i64>,
    ok: bool,
}

/// Runs the scenario as the module documentation says.
pub async fn run(args: &LoadArgs) -> anyhow::Result<()> {
    let db = crate::connect_db(&args.database).await?;
    let (conn, keys) = crate::connect_redis(&args.redis).await?;
    let prepared = Instant::now();
    let names: Vec<String> = (0..args.buyers)
        .map(|i| format!("flash-buyer-{i}"))
        .collect();
    let ids = db
        // A password nobody knows, fresh each run: the accounts stay in the
        // database after the run, and a published password would open them.
        .create_users_sharing_password(&names, SessionToken::generate().expose())
        .await
        .context("cannot register the buyers")?;
    let sessions = Sessions::new(conn.clone(), keys.clone());
    let cookies: Vec<String> = futures::stream::iter(ids)
        .map(|user| {
            let sessions = sessions.clone();
            async move {
                let token = sessions
                    .login(&SessionToken::generate(), user, None)
                    .await?;
                Ok::<_, shop_cache::CacheError>(format!("shop_session={}", token.expose()))
            }
        })
        .buffered(LOGINS_AT_ONCE)
        .collect::<Vec<_>>()
        .await
        .into_iter()
        .collect::<Result<_, _>>()
        .context("cannot log the buyers in")?;

    let now = shop_db::unix_now();
    let terms = Sale {
        stock: args.stock,
        price_cents: 100,
        start: now - 1,
        end: now + 3_600,
    };
    let cache = crate::connect::connect_configured_cache(&args.redis).await?;
    let parts = sale::SaleParts::new(&conn, cache, &keys);
    // Listened for from before the sale starts: a stop ends the run, and the
    // sale with it.
    let stop = crate::shutdown::listen();
    // A new sale each run: the buyers are the same accounts as the last run's.
    let set = sale::start_anew(
        &parts.stores(&db),
        args.sale_item,
        terms,
        sale::DEFAULT_REFRESH,
    )
    .await?;
    crate::commands::sale::started(args.sale_item, set)?;
    eprintln!(
        "prepared {} buyers and a sale of {} units in {:.1} s",
        args.buyers,
        args.stock,
        prepared.elapsed().as_secs_f64()
    );

    // The sale ends with the run, however the run ends: an item of a real
    // catalogue is not left on sale at a made-up price.
    let ran = tokio::select! {
        ran = burst(args, &db, &parts, cookies) => ran,
        () = stop => Err(anyhow::anyhow!("stopped (SIGINT/SIGTERM)")),
    };
    // Bounded: a store that does not answer leaves the sale to `shop sale stop`.
    let ended = match tokio::time::timeout(
        std::time::Duration::from_secs(30),
        sale::stop(&parts.stores(&db), args.sale_item),
    )
    .await
    {
        Ok(ended) => ended.map_err(anyhow::Error::from),
        Err(_) => Err(anyhow::anyhow!("timed out after 30 s")),
    };
    parts.settle_edges().await;
    db.close().await;
    ended.context("cannot end the sale this run started: end it with `shop sale stop`")?;
    eprintln!("ended the sale of item {}", args.sale_item);
    ran
}

/// The burst and its check, on a sale started.
async fn burst(
    args: &LoadArgs,
    db: &shop_db::Db,
    parts: &sale::SaleParts,
    cookies: Vec<String>,
) -> anyhow::Result<()> {
    // Each run's keys are its own, so its orders can be counted apart.
    let key_prefix = format!("flash-load-{}", SessionToken::generate().expose());
    let report = shop_load::flash::run(FlashLoad {
        target: args.target.clone(),
        item: args.sale_item.get(),
        cookies,
        connections: args.connections as usize,
        key_prefix: key_prefix.clone(),
    })
    .await?;
    print!("{}", report.render());

    let orders = db
        .flash_units_keyed(args.sale_item, &format!("{key_prefix}-"))
        .await?;
    let database_stock_left = db
        .inventory_row(args.sale_item)
        .await?
        .map_or(0, |row| row.stock);
    let redis_stock_left = parts.flash().state(args.sale_item).await?.map(|s| s.stock);
    let expected = args.stock.min(args.buyers as i64);
    let check = Check {
        stock: args.stock,
        orders,
        oversold: (orders - args.stock).max(0),
        database_stock_left,
        redis_stock_left,
        ok: orders == expected
            && report.server_errors() == 0
            && report.outcomes.get("bought").copied().unwrap_or(0) == orders as u64
            && report.distinct_orders as i64 == orders,
    };
    crate::say!(
        "orders     {orders} units ordered for a stock of {} ({} oversold); stock left: \
         database {database_stock_left}, redis {}",
        check.stock,
        check.oversold,
        redis_stock_left.map_or("-".to_owned(), |s| s.to_string())
    );
    if let Some(path) = &args.json {
        #[derive(serde::Serialize)]
        struct Out<'a> {
            report: &'a FlashReport,
            check: &'a Check,
        }
        let json = serde_json::to_string_pretty(&Out {
            report: &report,
            check: &check,
        })?;
        std::fs::write(path, json).with_context(|| format!("cannot write {}", path.display()))?;
    }
    anyhow::ensure!(
        check.ok,
        "the sale went wrong: {orders} units ordered, {expected} expected, {} 5xx",
        report.server_errors()
    );
    Ok(())
}
