//! What the integration tests of this crate and of the crates built on it run
//! against (feature `testing`): a [`Fixture`] per test, its own `redis-server` with
//! the book's layout or its own 6-node cluster with the cluster layout, and
//! [`crate::both_layouts!`], which runs one test body on each.

use shop_testkit::{TestRedis, TestRedisCluster};

use crate::RedisConn;
use crate::keys::{Keys, Layout};

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
        let server = TestRedis::start();
        let conn = crate::connect(&server.url()).await.unwrap();
        Self {
            server: Server::Node(server),
            conn,
            keys: Keys::default(),
        }
    }

    /// A private cluster with the cluster layout (default shard count).
    pub async fn cluster() -> Self {
        let cluster = TestRedisCluster::start();
        let conn = crate::connect_cluster(&cluster.addrs()).await.unwrap();
        Self {
            server: Server::Cluster(cluster),
            conn,
            keys: Keys::cluster(""),
        }
    }

    /// The same fixture with the session index split into `shards` on a cluster
    /// (the book layout, one shard, is left as it is). The session cleaner keeps
    /// `cap / shards` sessions per shard: a test that counts exactly what it keeps
    /// and removes uses a few shards it can fill evenly (see `cleaner::token_in`).
    pub fn with_session_shards(mut self, shards: u32) -> Self {
        if let Layout::Cluster { .. } = self.keys.layout() {
            self.keys = Keys::new(self.keys.prefix(), Layout::Cluster { shards })
                .expect("a valid shard count");
        }
        self
    }

    /// A second connection of the same kind, for a test's own reads and writes
    /// (checking what the code under test stored).
    pub async fn raw(&self) -> RedisConn {
        match &self.server {
            Server::Node(server) => crate::connect(&server.url()).await.unwrap(),
            Server::Cluster(cluster) => crate::connect_cluster(&cluster.addrs()).await.unwrap(),
        }
    }

    /// Every key stored, sorted (over every primary of a cluster).
    pub async fn all_keys(&self) -> Vec<String> {
        match &self.server {
            Server::Node(server) => server.all_keys().await,
            Server::Cluster(cluster) => cluster.all_keys().await,
        }
    }
}

/// Runs each test body twice: `one_node` (a `redis-server`, the book's layout) and
/// `cluster` (a 6-node cluster, the cluster layout). Each test is a module named
/// after it, so a failure reads `session::touch_works::cluster`. A test marked
/// `#[multi_thread]` (after its doc comment) runs on a two-thread runtime, for
/// tests of workers racing each other.
#[macro_export]
macro_rules! both_layouts {
    () => {};
    (
        $(#[doc = $doc:expr])*
        #[multi_thread]
        async fn $name:ident($fx:ident: Fixture) $body:block
        $($rest:tt)*
    ) => {
        $crate::both_layouts!(
            @test [$(#[doc = $doc])*] [flavor = "multi_thread", worker_threads = 2]
            $name $fx $body
        );
        $crate::both_layouts!($($rest)*);
    };
    (
        $(#[$meta:meta])*
        async fn $name:ident($fx:ident: Fixture) $body:block
        $($rest:tt)*
    ) => {
        $crate::both_layouts!(@test [$(#[$meta])*] [] $name $fx $body);
        $crate::both_layouts!($($rest)*);
    };
    (@test [$($meta:tt)*] [$($runtime:tt)*] $name:ident $fx:ident $body:block) => {
        $($meta)*
        mod $name {
            #[allow(unused_imports)]
            use super::*;

            async fn body($fx: $crate::testing::Fixture) $body

            #[tokio::test($($runtime)*)]
            async fn one_node() {
                body($crate::testing::Fixture::node().await).await
            }

            #[tokio::test($($runtime)*)]
            async fn cluster() {
                body($crate::testing::Fixture::cluster().await).await
            }
        }
    };
}
