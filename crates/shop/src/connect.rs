//! Connecting to Redis and the database as the flags say, with errors that say
//! what to do.

use anyhow::Context;
use shop_cache::RedisConn;
use shop_cache::keys::Keys;
use shop_db::Db;

use crate::config::{DatabaseSettings, RedisSettings, redact_url};

/// Connects to Redis as configured, with a message that says what to do if it fails.
pub async fn connect_redis(redis: &RedisSettings) -> anyhow::Result<(RedisConn, Keys)> {
    connect_redis_at(redis.url(), redis).await
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

/// The cache Redis the flags name, if any.
pub async fn connect_configured_cache(redis: &RedisSettings) -> anyhow::Result<Option<RedisConn>> {
    match &redis.cache_redis_url {
        Some(url) => Ok(Some(connect_cache(url.expose(), redis).await?)),
        None => Ok(None),
    }
}

/// Connects to (and migrates) the database as configured.
pub async fn connect_db(database: &DatabaseSettings) -> anyhow::Result<Db> {
    Db::connect(database.database_url.expose())
        .await
        .with_context(|| format!("cannot open the database at {}", database.database_url))
}
