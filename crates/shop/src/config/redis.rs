//! The `[redis]` section: where the hot state lives (one node, a cluster, a
//! second Redis for the pages), and the key layout it implies.

use clap::Args;
use serde::Deserialize;

use super::secret::{SecretUrl, redact_url};

/// Where the hot state lives.
#[derive(Debug, Clone, Args, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RedisSettings {
    /// Redis to use: redis://host:port/db or unix:///path/to/socket [default: none;
    /// `serve` starts a private pair under `data/`, which the other commands run in
    /// the same directory use].
    #[arg(long, global = true, env = "REDIS_URL", hide_env_values = true)]
    pub redis_url: Option<SecretUrl>,
    /// A second Redis for the cached pages only (rebuildable; configure it with
    /// `maxmemory` and `allkeys-lru`), so pages can never push out sessions, carts
    /// or sales [default: the pages share the state Redis; a private one beside
    /// the private state Redis].
    #[arg(
        long,
        global = true,
        env = "SHOP_CACHE_REDIS_URL",
        hide_env_values = true
    )]
    pub cache_redis_url: Option<SecretUrl>,
    /// A Redis Cluster to use instead: some of its nodes as host:port,host:port,...
    /// Selects the cluster key layout (hash-tagged keys, a sharded session index).
    #[arg(
        long,
        global = true,
        env = "SHOP_REDIS_CLUSTER",
        hide_env_values = true,
        value_delimiter = ',',
        conflicts_with = "redis_url",
        value_parser = parse_seed
    )]
    pub redis_cluster: Vec<String>,
    /// How many shards the cluster layout splits the session index into.
    #[arg(
        long,
        global = true,
        env = "SHOP_SESSION_SHARDS",
        default_value_t = shop_cache::keys::DEFAULT_SHARDS,
        value_parser = clap::value_parser!(u32).range(1..=i64::from(shop_cache::keys::MAX_SHARDS)),
    )]
    pub session_shards: u32,
    /// Namespace put before every key, so several shops can share one Redis.
    #[arg(long, global = true, env = "SHOP_KEY_PREFIX", default_value = "")]
    pub key_prefix: String,
    /// Connections to one Redis node, used in turn (not for a cluster).
    #[arg(
        long,
        global = true,
        env = "SHOP_REDIS_POOL",
        default_value_t = shop_cache::connection::DEFAULT_POOL as u8,
        value_parser = clap::value_parser!(u8).range(1..=64),
    )]
    pub redis_pool: u8,
}

/// One cluster node, `host:port` (or a `redis://` URL).
pub(super) fn parse_seed(s: &str) -> Result<String, String> {
    let s = s.trim();
    let addr = s.strip_prefix("redis://").unwrap_or(s);
    match addr.rsplit_once(':') {
        Some((host, port)) if !host.is_empty() && port.parse::<u16>().is_ok_and(|p| p > 0) => {
            Ok(s.to_owned())
        }
        _ => Err(format!("`{s}` is not host:port")),
    }
}

impl RedisSettings {
    /// True when a cluster is configured.
    pub fn is_cluster(&self) -> bool {
        !self.redis_cluster.is_empty()
    }

    /// Where Redis is, for logs (no password).
    pub fn describe(&self) -> String {
        if self.is_cluster() {
            format!("cluster {}", redact_url(&self.redis_cluster.join(",")))
        } else {
            match &self.redis_url {
                Some(url) => redact_url(url.expose()),
                None => "the private Redis under data/redis".to_owned(),
            }
        }
    }

    /// The key layout: the book's for one node, hash-tagged for a cluster.
    pub fn keys(&self) -> shop_cache::keys::Keys {
        let layout = if self.is_cluster() {
            shop_cache::keys::Layout::Cluster {
                shards: self.session_shards,
            }
        } else {
            shop_cache::keys::Layout::Book
        };
        shop_cache::keys::Keys::new(&self.key_prefix, layout)
            .expect("the shard count is checked when parsed")
    }
}
