//! Integration tests of the Redis layer, each against its own Redis: most run twice,
//! once on a single `redis-server` with the book's key layout and once on a private
//! 6-node Redis Cluster with the cluster layout (one test body, two fixtures: see
//! [`both_layouts!`]).

mod analytics;
mod cart;
mod cleaner;
mod insights;
mod outage;
mod session;

use shop_cache::RedisConn;
use shop_cache::keys::Keys;
use shop_testkit::{TestRedis, TestRedisCluster};

/// A fresh single server and the shop's connection to it.
pub async fn redis() -> (TestRedis, RedisConn) {
    let server = TestRedis::start();
    let conn = shop_cache::connect(&server.url()).await.unwrap();
    (server, conn)
}

/// The book's key layout, which the single-node-only assertions spell out literally.
pub fn keys() -> Keys {
    Keys::default()
}

/// Every key in the server, sorted.
pub async fn all_keys(server: &TestRedis) -> Vec<String> {
    let mut keys: Vec<String> = redis::cmd("KEYS")
        .arg("*")
        .query_async(&mut server.conn().await)
        .await
        .unwrap();
    keys.sort();
    keys
}

/// The Redis a test runs against, with the layout that goes with it.
pub enum Server {
    /// One `redis-server`, the book's layout.
    Node(TestRedis),
    /// Three primaries and three replicas, the cluster layout.
    Cluster(TestRedisCluster),
}

/// One test's Redis: the server, the shop's connection and the keys to use.
pub struct Fixture {
    /// The Redis, kept alive for the test.
    pub server: Server,
    /// The shop's connection, as the code under test uses it.
    pub conn: RedisConn,
    /// The layout that goes with the server.
    pub keys: Keys,
}

impl Fixture {
    /// A single server with the book's layout.
    pub async fn node() -> Self {
        let (server, conn) = redis().await;
        Self {
            server: Server::Node(server),
            conn,
            keys: Keys::default(),
        }
    }

    /// A private cluster with the cluster layout (default shard count).
    pub async fn cluster() -> Self {
        let cluster = TestRedisCluster::start();
        let conn = shop_cache::connect_cluster(&cluster.addrs()).await.unwrap();
        Self {
            server: Server::Cluster(cluster),
            conn,
            keys: Keys::cluster(""),
        }
    }

    /// A second connection of the same kind, for a test's own reads and writes
    /// (checking what the code under test stored).
    pub async fn raw(&self) -> RedisConn {
        match &self.server {
            Server::Node(server) => shop_cache::connect(&server.url()).await.unwrap(),
            Server::Cluster(cluster) => {
                shop_cache::connect_cluster(&cluster.addrs()).await.unwrap()
            }
        }
    }

    /// Every key stored, sorted (over every primary of a cluster).
    pub async fn all_keys(&self) -> Vec<String> {
        match &self.server {
            Server::Node(server) => all_keys(server).await,
            Server::Cluster(cluster) => cluster.all_keys().await,
        }
    }
}

/// Runs each test body twice: `one_node` (a `redis-server`, the book's layout) and
/// `cluster` (a 6-node cluster, the cluster layout). Each test is a module named
/// after it, so a failure reads `session::touch_works::cluster`.
#[macro_export]
macro_rules! both_layouts {
    ($(
        $(#[$meta:meta])*
        async fn $name:ident($fx:ident: Fixture) $body:block
    )*) => {
        $(
            $(#[$meta])*
            mod $name {
                #[allow(unused_imports)]
                use super::*;

                async fn body($fx: $crate::Fixture) $body

                #[tokio::test]
                async fn one_node() {
                    body($crate::Fixture::node().await).await
                }

                #[tokio::test]
                async fn cluster() {
                    body($crate::Fixture::cluster().await).await
                }
            }
        )*
    };
}
