//! The `shop` binary's library half: it parses nothing and holds no logic of the
//! shop itself; it connects the layers (Redis, database, web) as the configuration
//! says and runs one subcommand. `main.rs` only parses flags and sets up logging.

pub mod config;
pub mod flash_load;
pub mod managed_redis;
pub mod sale;
pub mod server;
pub mod shutdown;

use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::{Duration, Instant};

use anyhow::Context;
use shop_cache::RedisConn;
use shop_cache::analytics::Rescaler;
use shop_cache::domain::ItemId;
use shop_cache::flash_sale::{FlashSales, Reconciler};
use shop_cache::keys::Keys;
use shop_cache::row_cache::{Refresher, RowCache, RowSource, SourceError};
use shop_cache::session::ViewFlusher;
use shop_cache::session_cleaner::SessionCleaner;
use shop_db::Db;
use shop_web::{AppState, WebConfig};

use managed_redis::ManagedRedis;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use config::{
    Cli, Command, DEFAULT_REDIS_URL, DatabaseArgs, LoadArgs, RedisArgs, RowsArgs, RowsCommand,
    SaleCommand, SeedArgs, ServeArgs, UsersCommand, WorkArgs, WorkerArgs, redact_url,
};

/// Runs one subcommand to its end (for `serve` and `work`: until SIGINT/SIGTERM).
pub async fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Serve(args) => serve(args).await,
        Command::Work(args) => work(args).await,
        Command::Seed(args) => seed(args).await,
        Command::Rows(args) => rows(args).await,
        Command::Sale(args) => sale_command(args.command).await,
        Command::Users(args) => users_command(args.command).await,
        Command::Load(args) => load(args).await,
    }
}

/// Connects to Redis as configured, with a message that says what to do if it fails.
pub async fn connect_redis(redis: &RedisArgs) -> anyhow::Result<(RedisConn, Keys)> {
    connect_redis_at(redis.url(), redis).await
}

async fn connect_redis_at(url: &str, redis: &RedisArgs) -> anyhow::Result<(RedisConn, Keys)> {
    if redis.is_cluster() {
        let conn = shop_cache::connect_cluster(&redis.redis_cluster)
            .await
            .with_context(|| {
                format!(
                    "cannot reach the Redis Cluster at {}; check the nodes \
                     (`scripts/redis-cluster start` runs a local one)",
                    redis.describe()
                )
            })?;
        return Ok((conn, redis.keys()));
    }
    let conn = shop_cache::connect(url).await.with_context(|| {
        format!(
            "cannot reach Redis at {}; start one (Debian: `apt-get install redis-server`) \
             or set REDIS_URL",
            redact_url(url)
        )
    })?;
    Ok((conn, redis.keys()))
}

/// Where the managed Redis keeps its files.
pub const MANAGED_REDIS_DIR: &str = "data/redis";

/// The Redis `serve` uses: the configured one; else the default address if it
/// answers; else (or with `--managed-redis`) a private one it starts.
async fn serve_redis(args: &ServeArgs) -> anyhow::Result<(String, Option<ManagedRedis>)> {
    if let Some(url) = &args.redis.redis_url {
        return Ok((url.clone(), None));
    }
    if args.redis.is_cluster() {
        return Ok((String::new(), None));
    }
    if !args.managed_redis && managed_redis::ping(DEFAULT_REDIS_URL).await {
        return Ok((DEFAULT_REDIS_URL.to_owned(), None));
    }
    let managed = ManagedRedis::start(std::path::Path::new(MANAGED_REDIS_DIR)).await?;
    println!("started a private redis-server at {}", managed.url());
    Ok((managed.url(), Some(managed)))
}

/// Connects to (and migrates) the database as configured.
pub async fn connect_db(database: &DatabaseArgs) -> anyhow::Result<Db> {
    Db::connect(&database.database_url).await.with_context(|| {
        format!(
            "cannot open the database at {}",
            redact_url(&database.database_url)
        )
    })
}

/// The row cache's source: inventory rows from the database, as JSON.
pub fn row_source(db: Db) -> impl RowSource + 'static {
    move |row: ItemId| {
        let db = db.clone();
        async move {
            db.inventory_json(row)
                .await
                .map_err(|e| Box::new(e) as SourceError)
        }
    }
}

/// Starts every daemon on `set`, each stopping when `shutdown` is cancelled.
/// Returns the session cleaner's removal counter, for metrics.
pub fn spawn_daemons(
    set: &mut JoinSet<()>,
    conn: &RedisConn,
    keys: &Keys,
    db: &Db,
    workers: &WorkerArgs,
    shutdown: &CancellationToken,
) -> anyhow::Result<Arc<AtomicU64>> {
    let cleaner = SessionCleaner::new(
        conn.clone(),
        keys.clone(),
        workers.session_cap,
        workers.cleaner_batch,
    )?;
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
    let removed = cleaner.removed_counter();
    set.spawn(shop_cache::daemon::run(cleaner, shutdown.clone()));
    set.spawn(shop_cache::daemon::run(rescaler, shutdown.clone()));
    set.spawn(shop_cache::daemon::run(refresher, shutdown.clone()));
    set.spawn(shop_cache::daemon::run(reconciler, shutdown.clone()));
    Ok(removed)
}

async fn join_all(mut daemons: JoinSet<()>) -> anyhow::Result<()> {
    while let Some(result) = daemons.join_next().await {
        result.context("a daemon panicked")?;
    }
    Ok(())
}

async fn serve(args: ServeArgs) -> anyhow::Result<()> {
    let (redis_url, managed) = serve_redis(&args).await?;
    let served = serve_with(&args, &redis_url).await;
    if let Some(managed) = managed {
        managed.stop().await;
    }
    served
}

async fn serve_with(args: &ServeArgs, redis_url: &str) -> anyhow::Result<()> {
    let (conn, keys) = connect_redis_at(redis_url, &args.redis).await?;
    let db = connect_db(&args.database).await?;
    if db.item_count().await? == 0 {
        seed_with_progress(
            &db,
            shop_db::seed::DEFAULT_ITEMS,
            shop_db::seed::DEFAULT_SEED,
        )
        .await?;
    }
    let config = WebConfig {
        flash_limit: args.flash_limit,
        flash_decider: args.flash_decider.into(),
        flash_hold: Duration::from_secs(args.flash_hold),
        secure_cookies: args.secure_cookies,
        max_quantity: args.max_quantity,
        page_ttl: Duration::from_secs(args.page_ttl),
        rank_limit: args.rank_limit,
        max_cart_lines: args.max_cart_lines,
        login_limits: shop_cache::login_limit::LoginLimits {
            per_address: args.login_limit_address,
            per_name: args.login_limit_name,
            ..Default::default()
        },
        trust_forwarded_for: args.trust_forwarded_for,
        demo_sale: args
            .demo_sale
            .then(|| ItemId::new(sale::DEMO_ITEM))
            .transpose()?,
    };
    if args.demo_sale {
        let parts = sale::SaleParts::new(&conn, &keys);
        if sale::start_demo(&parts.stores(&db)).await? {
            println!(
                "started a demo flash sale of item {}: see /flash (--demo-sale false to skip)",
                sale::DEMO_ITEM
            );
        }
    }
    let state = AppState::new(db.clone(), conn.clone(), keys.clone(), config);
    let metrics = state.metrics.clone();
    let listener = tokio::net::TcpListener::bind(args.bind)
        .await
        .with_context(|| format!("cannot listen on {}", args.bind))?;
    let addr = listener.local_addr()?;

    let shutdown = CancellationToken::new();
    let mut daemons = JoinSet::new();
    if !args.no_workers {
        let removed = spawn_daemons(&mut daemons, &conn, &keys, &db, &args.workers, &shutdown)?;
        metrics.register_cleaner(removed);
    }
    // Every serving process writes the views it counted (cluster layout), workers
    // or not; stopped only after the last request is answered, so its final flush
    // loses none.
    let flush_stop = CancellationToken::new();
    let flusher = tokio::spawn(shop_cache::daemon::run(
        ViewFlusher::new(state.sessions.clone()),
        flush_stop.clone(),
    ));
    // Every serving process reads the sales for its own sale pages; stopped at the
    // shutdown signal, which ends the pages' event streams so connections drain.
    if let Some(watcher) = state.take_sale_watcher() {
        daemons.spawn(shop_cache::daemon::run(watcher, shutdown.clone()));
    }
    // And keeps the last minutes of its own traffic for /ops.
    daemons.spawn(shop_cache::daemon::run(
        state.traffic_sampler(),
        shutdown.clone(),
    ));
    println!("shop is serving at http://{addr}/");
    let stop = shutdown.clone();
    let options = server::ServeOptions {
        header_timeout: Duration::from_secs(args.header_timeout),
        shutdown_grace: Duration::from_secs(args.shutdown_grace),
    };
    server::serve(listener, shop_web::router(state), &options, async move {
        shutdown::signal().await;
        tracing::info!("shutting down");
        stop.cancel();
    })
    .await;
    shutdown.cancel();
    flush_stop.cancel();
    flusher.await.context("the view flusher panicked")?;
    join_all(daemons).await
}

async fn work(args: WorkArgs) -> anyhow::Result<()> {
    let (conn, keys) = connect_redis(&args.redis).await?;
    let db = connect_db(&args.database).await?;
    tracing::info!(redis = %args.redis.describe(), "worker connected");
    let shutdown = CancellationToken::new();
    let mut daemons = JoinSet::new();
    spawn_daemons(&mut daemons, &conn, &keys, &db, &args.workers, &shutdown)?;
    shutdown::signal().await;
    tracing::info!("shutting down");
    shutdown.cancel();
    join_all(daemons).await
}

async fn seed(args: SeedArgs) -> anyhow::Result<()> {
    let db = connect_db(&args.database).await?;
    seed_with_progress(&db, args.items, args.seed).await
}

async fn seed_with_progress(db: &Db, items: u64, seed: u64) -> anyhow::Result<()> {
    let bar = indicatif::ProgressBar::new(items).with_style(
        indicatif::ProgressStyle::with_template("seeding {bar:40} {pos}/{len} items ({eta} left)")
            .expect("a valid progress template"),
    );
    let started = Instant::now();
    let report = db
        .seed(items, seed, &|done| bar.set_position(done))
        .await
        .context("seeding the catalogue")?;
    bar.finish_and_clear();
    println!(
        "seeded {} new items and {} demo users in {:.1?} (catalogue: {} items)",
        report.items,
        report.users,
        started.elapsed(),
        db.item_count().await?
    );
    if report.users > 0 {
        let users: Vec<String> = shop_db::seed::DEMO_USERS
            .iter()
            .map(|(name, password)| format!("{name} / {password}"))
            .collect();
        println!("demo logins: {}", users.join(", "));
    }
    Ok(())
}

async fn rows(args: RowsArgs) -> anyhow::Result<()> {
    let (conn, keys) = connect_redis(&args.redis).await?;
    let rows = RowCache::new(conn, keys);
    match args.command {
        RowsCommand::Schedule { id, delay } => {
            rows.schedule(id, delay).await?;
            println!("row {id} scheduled every {delay} s");
        }
        RowsCommand::Unschedule { id } => {
            rows.unschedule(id).await?;
            println!("row {id} unscheduled");
        }
        RowsCommand::List => {
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_secs_f64())
                .unwrap_or(0.0);
            println!("{:>12} {:>10} {:>12}", "row", "delay_s", "due_in_s");
            for r in rows.list().await? {
                let delay = r.delay.map_or("-".to_owned(), |d| d.to_string());
                println!("{:>12} {:>10} {:>12.1}", r.row, delay, r.next_at - now);
            }
        }
    }
    Ok(())
}

async fn users_command(command: UsersCommand) -> anyhow::Result<()> {
    match command {
        UsersCommand::Add {
            name,
            admin,
            database,
        } => {
            let mut password = String::new();
            std::io::stdin()
                .read_line(&mut password)
                .context("reading the password from standard input")?;
            let password = password.trim_end_matches(['\r', '\n']);
            shop_cache::domain::account::check_new_account(&name, password)?;
            let db = connect_db(&database).await?;
            if db.create_user(&name, password).await?.is_none() {
                anyhow::bail!("the name {name:?} is taken");
            }
            if admin {
                db.grant_admin(&name).await?;
            }
            println!("added {name}{}", if admin { " (admin)" } else { "" });
            Ok(())
        }
        UsersCommand::GrantAdmin { name, database } => {
            let db = connect_db(&database).await?;
            if !db.grant_admin(&name).await? {
                anyhow::bail!("there is no user {name:?}");
            }
            println!("{name} is an admin: /ops is open to them");
            Ok(())
        }
    }
}

async fn sale_command(command: SaleCommand) -> anyhow::Result<()> {
    match command {
        SaleCommand::Start {
            id,
            stock,
            price_cents,
            minutes,
            refresh,
            redis,
            database,
        } => {
            let (conn, keys) = connect_redis(&redis).await?;
            let db = connect_db(&database).await?;
            let start = shop_db::unix_now();
            let sale = shop_db::inventory::Sale {
                stock,
                price_cents,
                start,
                end: start + minutes * 60,
            };
            let parts = sale::SaleParts::new(&conn, &keys);
            if !sale::start(&parts.stores(&db), id, sale, refresh).await? {
                anyhow::bail!("there is no item {id}");
            }
            println!(
                "item {id} is on sale: {stock} units at {price_cents} cents for {minutes} min"
            );
            Ok(())
        }
    }
}

async fn load(args: LoadArgs) -> anyhow::Result<()> {
    if args.scenario == config::Scenario::Flash {
        return flash_load::run(&args).await;
    }
    let duration = match (args.duration, args.requests) {
        (Some(secs), _) if !(secs > 0.0 && secs.is_finite()) => {
            anyhow::bail!("--duration must be positive")
        }
        (Some(secs), _) => Some(Duration::from_secs_f64(secs)),
        (None, Some(_)) => None,
        (None, None) => Some(Duration::from_secs(10)),
    };
    let config = shop_load::LoadConfig {
        target: args.target,
        connections: args.connections as usize,
        duration,
        requests: args.requests,
        rate: args.rate,
        items: args.items,
        zipf_exponent: args.zipf,
        shoppers: args.shoppers as usize,
        mix: match (args.views_only, args.only) {
            (true, _) | (_, Some(config::OnlyArg::Views)) => shop_load::Mix::views_only(),
            (_, Some(config::OnlyArg::Browse)) => shop_load::Mix::browse_only(),
            (_, Some(config::OnlyArg::Search)) => shop_load::Mix::search_only(),
            (false, None) => shop_load::Mix::default(),
        },
        categories: shop_db::seed::CATEGORIES.map(str::to_owned).to_vec(),
        search_words: shop_db::seed::NOUNS
            .iter()
            .chain(&shop_db::seed::ADJECTIVES)
            .chain(&shop_db::seed::CATEGORIES)
            .map(|w| w.to_lowercase())
            .collect(),
        seed: args.seed,
        progress: !args.quiet,
    };
    let report = shop_load::run(config).await?;
    print!("{}", report.render());
    if let Some(path) = &args.json {
        report
            .write_json(path)
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    if let Some(path) = &args.plot {
        report
            .write_svg(path)
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    Ok(())
}
