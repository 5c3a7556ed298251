//! Connecting to Redis and the database as the flags say, with errors that say
//! what to do.

use anyhow::Context;
use shop_cache::RedisConn;
use shop_cache::keys::Keys;
use shop_db::Db;

use crate::config::{DatabaseSettings, RedisSettings, redact_url};
use crate::managed_redis;

/// Connects to Redis as configured, with a message that says what to do if it fails.
pub async fn connect_redis(redis: &RedisSettings) -> anyhow::Result<(RedisConn, Keys)> {
    connect_redis_at(&state_url(redis).await?, redis).await
}

/// The state Redis's URL: the one named (empty for a cluster, whose nodes the
/// settings name), else the private one a `shop serve` in this directory runs.
/// Never a Redis nobody named.
async fn state_url(redis: &RedisSettings) -> anyhow::Result<String> {
    if let Some(url) = &redis.redis_url {
        return Ok(url.expose().to_owned());
    }
    if redis.is_cluster() {
        return Ok(String::new());
    }
    managed_redis::running(managed_redis::STATE_DIR)
        .await
        .ok_or_else(|| {
            anyhow::anyhow!(
                "no Redis is named: set REDIS_URL (or --redis-url, --redis-cluster), or run \
                 `shop serve` in this directory first (it starts a private Redis under {} \
                 that the other commands then use)",
                managed_redis::STATE_DIR
            )
        })
}

/// Connects to the Redis at `url` (or the cluster the flags name).
pub async fn connect_redis_at(
    url: &str,
    redis: &RedisSettings,
) -> anyhow::Result<(RedisConn, Keys)> {
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
    let config = shop_cache::connection::default_config();
    let pool = usize::from(redis.redis_pool);
    let conn = shop_cache::connect_pooled(url, config, pool)
        .await
        .with_context(|| {
            format!(
                "cannot reach Redis at {}; start one (Debian: `apt-get install redis-server`) \
             or set REDIS_URL",
                redact_url(url)
            )
        })?;
    Ok((conn, redis.keys()))
}

/// Connects to the cache Redis at `url` (the cached pages' own, one node).
pub async fn connect_cache(url: &str, redis: &RedisSettings) -> anyhow::Result<RedisConn> {
    let config = shop_cache::connection::default_config();
    shop_cache::connect_pooled(url, config, usize::from(redis.redis_pool))
        .await
        .with_context(|| {
            format!(
                "cannot reach the cache Redis at {}; start one or unset SHOP_CACHE_REDIS_URL",
                redact_url(url)
            )
        })
}

/// The cache Redis the flags name, if any; with no Redis named at all, the
/// private one a `shop serve` in this directory runs (its pages are there, so a
/// purge must reach them there).
pub async fn connect_configured_cache(redis: &RedisSettings) -> anyhow::Result<Option<RedisConn>> {
    if let Some(url) = &redis.cache_redis_url {
        return Ok(Some(connect_cache(url.expose(), redis).await?));
    }
    if redis.redis_url.is_some() || redis.is_cluster() {
        return Ok(None);
    }
    match managed_redis::running(managed_redis::CACHE_DIR).await {
        Some(url) => Ok(Some(connect_cache(&url, redis).await?)),
        None => Ok(None),
    }
}

/// Connects to (and migrates) the database as configured; a SQLite file that is
/// not there is made, and the command says so on standard error (run from
/// another directory, the default `data/shop.db` is a new, empty shop).
pub async fn connect_db(database: &DatabaseSettings) -> anyhow::Result<Db> {
    let url = database.database_url.expose();
    let new_file = shop_db::sqlite_path(url).filter(|path| !std::path::Path::new(path).exists());
    let db = Db::connect(url)
        .await
        .with_context(|| format!("cannot open the database at {}", database.database_url))?;
    if let Some(path) = new_file {
        eprintln!("note: there was no database at {path}; a new, empty one is made there");
    }
    Ok(db)
}

/// [`connect_db`] for a command that changes what a shop's database holds
/// (an account, a sale, a cached row): a SQLite file that is not there is an
/// error naming it, and nothing is made (run from another directory, such a
/// command made an empty database and then found no one in it).
pub async fn connect_existing_db(database: &DatabaseSettings) -> anyhow::Result<Db> {
    let url = database.database_url.expose();
    if let Some(path) = shop_db::sqlite_path(url)
        && !std::path::Path::new(path).exists()
    {
        anyhow::bail!(
            "there is no database at {path}: run this in the shop's directory (where \
             `shop serve` keeps data/shop.db) or name the database with --database-url or \
             DATABASE_URL (`shop migrate` makes a new one)"
        );
    }
    connect_db(database).await
}

/// Warns when the state Redis at `conn` (one node) can lose what it holds: a
/// `maxmemory-policy` other than `noeviction` drops carts, sessions and a
/// sale's reservations when it is full, and no append-only file and no save
/// points lose them all at its restart (docs/security.md, docs/operations.md).
/// A Redis that refuses `CONFIG GET` (some hosted ones) is left unchecked.
pub async fn warn_if_state_redis_can_lose_data(conn: &RedisConn) {
    let mut conn = conn.clone();
    let mut setting = async |name: &str| -> Option<String> {
        let pair: Vec<String> = redis::cmd("CONFIG")
            .arg("GET")
            .arg(name)
            .query_async(&mut conn)
            .await
            .ok()?;
        pair.into_iter().nth(1)
    };
    let Some(policy) = setting("maxmemory-policy").await else {
        tracing::info!("the state Redis does not say its settings (CONFIG GET): unchecked");
        return;
    };
    if policy != "noeviction" {
        tracing::warn!(
            policy,
            "the state Redis evicts keys when full (maxmemory-policy {policy}): carts, \
             sessions and a sale's reservations can be dropped; set it to noeviction and \
             give the pages a Redis of their own (--cache-redis-url)"
        );
    }
    let aof = setting("appendonly").await.unwrap_or_default();
    let save = setting("save").await.unwrap_or_default();
    if aof == "no" && save.trim().is_empty() {
        tracing::warn!(
            "the state Redis keeps nothing on disk (appendonly no, no save points): \
             its restart empties every cart and session; turn on appendonly"
        );
    }
}
