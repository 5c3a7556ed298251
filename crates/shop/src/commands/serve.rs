//! `shop serve`: the web server, with the daemons in-process unless told not to.

use std::time::Duration;

use anyhow::Context;
use shop_cache::session::ViewFlusher;
use shop_web::{AppState, WebConfig};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::commands::seed;
use crate::config::{ServeArgs, Settings, WebSettings};
use crate::connect::{connect_cache, connect_db, connect_redis_at};
use crate::daemons::{join_all, spawn_daemons};
use crate::managed_redis::{self, ManagedRedis, Role};
use crate::{server, shutdown};
use shop_app::sale;
use shop_cache::RedisConn;
use shop_cache::domain::ItemId;
use shop_cache::domain::client::Networks;
use shop_cache::keys::Keys;
use shop_db::Db;

/// The Redis servers `serve` uses.
struct Served {
    /// The state Redis's URL (empty for a cluster: the settings name its nodes).
    state: String,
    /// The cache Redis's URL, when the pages have one of their own.
    cache: Option<String>,
    /// The private servers this process started, stopped when it stops.
    managed: Vec<ManagedRedis>,
}

/// The Redis `serve` uses: the one the settings name (`REDIS_URL`, a cluster)
/// unless `--managed-redis`; else a private pair it starts (state and cache, see [`managed_redis`]). Never a
/// Redis nobody named: one answering on the default port may be another
/// application's.
async fn serve_redis(settings: &Settings) -> anyhow::Result<Served> {
    let cache = settings
        .redis
        .cache_redis_url
        .as_ref()
        .map(|url| url.expose().to_owned());
    let configured = |state: String| Served {
        state,
        cache: cache.clone(),
        managed: Vec::new(),
    };
    if !settings.server.managed_redis {
        if let Some(url) = &settings.redis.redis_url {
            return Ok(configured(url.expose().to_owned()));
        }
        if settings.redis.is_cluster() {
            return Ok(configured(String::new()));
        }
    }
    let state =
        ManagedRedis::start(std::path::Path::new(managed_redis::STATE_DIR), Role::State).await?;
    crate::say!(
        "started a private redis-server at {} (append-only file on, never evicts)",
        state.url()
    );
    let mut served = Served {
        state: state.url(),
        cache: cache.clone(),
        managed: vec![state],
    };
    if cache.is_none() {
        let max_mb = settings.server.managed_cache_mb;
        let pages = ManagedRedis::start(
            std::path::Path::new(managed_redis::CACHE_DIR),
            Role::Cache { max_mb },
        )
        .await?;
        crate::say!(
            "started a private cache redis-server at {} (pages only, at most {max_mb} MB)",
            pages.url()
        );
        served.cache = Some(pages.url());
        served.managed.push(pages);
    }
    Ok(served)
}

/// What `--demo` (and its finer switches) add to the shop before it serves: the
/// demo catalogue in an empty database, the demo accounts, a demo sale when none
/// is running. Without them an empty catalogue is only reported, with how to fill
/// it. Returns the item a demo sale is of, for its page's mark.
async fn demo(
    web: &WebSettings,
    bind: std::net::SocketAddr,
    db: &Db,
    conn: &RedisConn,
    cache: Option<RedisConn>,
    keys: &Keys,
) -> anyhow::Result<Option<ItemId>> {
    if db.item_count().await? == 0 {
        if web.demo {
            seed::with_progress(db, web.demo_items, shop_db::seed::DEFAULT_SEED).await?;
        } else {
            crate::say!(
                "the catalogue is empty: load yours with `shop items import FILE` \
                 (JSON Lines), or the demo catalogue with `shop seed` (or serve with --demo)"
            );
        }
    }
    if web.demo_users() {
        seed::demo_users(db).await?;
        if !bind.ip().is_loopback() {
            tracing::warn!(
                %bind,
                "the demo accounts' passwords are published and this shop listens beyond \
                 this machine: anyone who reaches it can log in as them (serve without \
                 --demo-users, or remove them)"
            );
        }
    }
    if !web.demo_sale() {
        return Ok(None);
    }
    let Some(item) = sale::demo_item(db).await? else {
        return Ok(None);
    };
    let parts = sale::SaleParts::new(conn, cache, keys);
    if sale::start_demo(&parts.stores(db), item).await? {
        crate::say!("started a demo flash sale of item {item}: see /flash");
    }
    Ok(Some(item))
}

/// Whether a trusted proxy could connect to a listener bound to `bind`: any
/// may, unless it is bound to loopback, where a peer is a loopback address of
/// its family (127.0.0.1 as a proxy on the same host connects from, or ::1).
fn could_reach(proxies: &Networks, bind: std::net::IpAddr) -> bool {
    let peer = match bind {
        std::net::IpAddr::V4(_) => std::net::IpAddr::from([127, 0, 0, 1]),
        std::net::IpAddr::V6(_) => std::net::Ipv6Addr::LOCALHOST.into(),
    };
    !bind.is_loopback() || proxies.contains(peer)
}

/// Runs `shop serve` until SIGINT/SIGTERM.
pub async fn run(args: ServeArgs) -> anyhow::Result<()> {
    let web = &args.settings.web;
    if web.trusted_proxies.is_some() && !web.trust_forwarded_for {
        // A check of its own, not clap's `requires`: a settings file's values
        // reach clap as defaults, which `requires` does not count.
        anyhow::bail!(
            "--trusted-proxies (SHOP_TRUSTED_PROXIES) names proxies for --trust-forwarded-for \
             (SHOP_TRUST_FORWARDED_FOR), which is off"
        );
    }
    // Listening for the stop signal from the start: a stop sent while it starts
    // (a long seed, say) ends the start, and one sent the moment it prints its
    // address is a graceful stop; either way the private Redis it started stops.
    let stopping = CancellationToken::new();
    tokio::spawn({
        let signal = shutdown::listen();
        let stopping = stopping.clone();
        async move {
            signal.await;
            stopping.cancel();
        }
    });
    let served = tokio::select! {
        served = serve_redis(&args.settings) => served?,
        () = stopping.cancelled() => return Ok(()),
    };
    let result = serve_with(&args, &served.state, served.cache.as_deref(), &stopping).await;
    for managed in served.managed {
        managed.stop().await;
    }
    result
}

async fn serve_with(
    args: &ServeArgs,
    redis_url: &str,
    cache_url: Option<&str>,
    stopping: &CancellationToken,
) -> anyhow::Result<()> {
    let Settings {
        server,
        web,
        redis,
        database,
        workers,
        edge,
    } = &args.settings;
    let start = async {
        let (conn, keys) = connect_redis_at(redis_url, redis).await?;
        if !conn.is_cluster() {
            crate::connect::warn_if_state_redis_can_lose_data(&conn).await;
        }
        let cache = match cache_url {
            Some(url) => Some(connect_cache(url, redis).await?),
            None => None,
        };
        let db = connect_db(database).await?;
        let demo_sale = demo(web, server.bind, &db, &conn, cache.clone(), &keys).await?;
        anyhow::Ok((conn, keys, cache, db, demo_sale))
    };
    let (conn, keys, cache, db, demo_sale) = tokio::select! {
        started = start => started?,
        () = stopping.cancelled() => return Ok(()),
    };
    let config = WebConfig {
        session_lifetimes: workers.lifetimes(),
        edge_purger: edge.purger(),
        demo_sale,
        ..WebConfig::from(web)
    };
    let state = AppState::with_cache(db.clone(), conn.clone(), cache, keys.clone(), config);
    let metrics = state.metrics.clone();
    let listener =
        server::listen(server.bind).with_context(|| format!("cannot listen on {}", server.bind))?;
    let addr = listener.local_addr()?;
    let metrics_bind = server.metrics_addr();
    let metrics_listener = server::listen(metrics_bind)
        .with_context(|| format!("cannot listen on {metrics_bind} (--metrics-bind)"))?;
    let metrics_addr = metrics_listener.local_addr()?;

    let shutdown = CancellationToken::new();
    let mut daemons = JoinSet::new();
    if !args.no_workers {
        let counters = spawn_daemons(&mut daemons, &conn, &keys, &db, workers, &shutdown)?;
        metrics.register_cleaner(counters.removed);
        metrics.register_reconciler(counters.reconciled);
    }
    // Every serving process writes the views it counted, workers
    // or not; stopped only after the last request is answered, so its final flush
    // loses none.
    let flush_stop = CancellationToken::new();
    let flusher = tokio::spawn(shop_cache::daemon::run(
        ViewFlusher::new(state.sessions.over(conn.clone())),
        flush_stop.clone(),
    ));
    // Every serving process reads the sales for its own sale pages; stopped at the
    // shutdown signal, which ends the pages' event streams so connections drain.
    if let Some(watcher) = state.take_sale_watcher() {
        daemons.spawn(shop_cache::daemon::run(watcher, shutdown.clone()));
        daemons.spawn(shop_cache::daemon::run(state.sale_ends(), shutdown.clone()));
    }
    // Its own copy of the ranking's top (the page cache's gate), and the feed
    // that keeps its in-process page tier coherent.
    daemons.spawn(shop_cache::daemon::run(
        state.top_items_refresher(),
        shutdown.clone(),
    ));
    if let Some(feed) = state.tier_feed() {
        daemons.spawn(shop_cache::daemon::run(feed, shutdown.clone()));
    }
    // Asks Redis each second, traffic or not, so /healthz knows of a stall.
    daemons.spawn(shop_cache::daemon::run(
        state.health_watch(),
        shutdown.clone(),
    ));
    // And keeps the last minutes of its own traffic for /ops.
    daemons.spawn(shop_cache::daemon::run(
        state.traffic_sampler(),
        shutdown.clone(),
    ));
    // The operators' address first: a script that waits for the "serving at"
    // line finds it there already.
    crate::say!("shop metrics at http://{metrics_addr}/metrics");
    crate::say!("shop is serving at http://{addr}/");
    let stop = shutdown.clone();
    let files = server::raise_open_files_limit();
    let room = files.saturating_sub(server::RESERVED_FILES).max(1);
    let max_connections = server.max_connections.min(room);
    if max_connections < server.max_connections {
        tracing::warn!(
            files,
            max_connections,
            "the open-files limit allows fewer connections than --max-connections"
        );
    }
    let options = server::ServeOptions {
        header_timeout: Duration::from_secs(server.header_timeout),
        shutdown_grace: Duration::from_secs(server.shutdown_grace),
        max_connections: max_connections as usize,
        // Behind a trusted proxy every connection comes from the proxy.
        max_connections_per_address: (!web.trust_forwarded_for)
            .then_some(server.max_connections_per_address as usize),
        proxies_only: web.trust_forwarded_for.then(|| {
            web.trusted_proxies
                .clone()
                .unwrap_or_else(Networks::private)
        }),
    };
    if let Some(proxies) = &options.proxies_only {
        tracing::info!(%proxies, "behind proxies: the public port takes their connections alone");
        if !could_reach(proxies, server.bind.ip()) {
            tracing::warn!(
                %proxies,
                bind = %server.bind,
                "the public port is bound to loopback, where only this host's own \
                 addresses connect, and no trusted proxy is one of them: every \
                 connection to it will be closed (add 127.0.0.1 or ::1 to \
                 --trusted-proxies, or bind another address)"
            );
        }
    }
    // The operators' listener: `/metrics` and the detailed `/healthz`, stopped
    // with the rest.
    let internal = tokio::spawn({
        let app = shop_web::internal_router(state.clone());
        // Operators' tools (a metrics scraper) are no proxies of the shop's.
        let options = server::ServeOptions {
            proxies_only: None,
            ..options.clone()
        };
        let stop = shutdown.clone();
        async move {
            server::serve(metrics_listener, app, &options, stop.cancelled_owned()).await;
        }
    });
    let stopping = stopping.clone();
    let drain = Duration::from_secs(server.drain_seconds);
    let health = state.clone();
    server::serve(listener, shop_web::router(state), &options, async move {
        stopping.cancelled().await;
        if !drain.is_zero() {
            // Still serving, while the balancer learns from /healthz to send
            // nothing more; a second signal cuts it short.
            let again = shutdown::listen();
            health.health.start_draining();
            tracing::info!(
                seconds = drain.as_secs(),
                "draining: /healthz answers 503 while requests are still served"
            );
            tokio::select! {
                () = tokio::time::sleep(drain) => {}
                () = again => {}
            }
        }
        tracing::info!("shutting down");
        stop.cancel();
    })
    .await;
    shutdown.cancel();
    internal.await.context("the operators' listener panicked")?;
    flush_stop.cancel();
    flusher.await.context("the view flusher panicked")?;
    join_all(daemons).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_loopback_bind_is_reached_by_loopback_proxies_of_its_family() {
        let list = |text: &str| text.parse::<Networks>().unwrap();
        let v4: std::net::IpAddr = [127, 0, 0, 1].into();
        let v6: std::net::IpAddr = std::net::Ipv6Addr::LOCALHOST.into();
        assert!(could_reach(&list("127.0.0.0/8"), v4));
        assert!(
            !could_reach(&list("::1"), v4),
            "::1 never reaches 127.0.0.1"
        );
        assert!(!could_reach(&list("10.0.0.0/8"), v4));
        assert!(could_reach(&list("::1"), v6));
        assert!(!could_reach(&list("127.0.0.1"), v6));
        assert!(could_reach(&list("10.0.0.0/8"), [0, 0, 0, 0].into()));
    }
}
