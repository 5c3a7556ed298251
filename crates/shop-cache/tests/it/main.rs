//! Integration tests of the Redis layer, each against its own Redis: most run twice,
//! once on a single `redis-server` with the book's key layout and once on a private
//! 6-node Redis Cluster with the cluster layout (one test body, two fixtures: see
//! `shop_cache::both_layouts!`).

mod analytics;
mod cart;
mod cleaner;
mod flash_sale;
mod insights;
mod lifetimes;
mod login_limit;
mod node_breakers;
mod outage;
mod row_cache;
mod session;
mod user_sessions;

use shop_cache::RedisConn;
pub use shop_cache::both_layouts;
use shop_cache::keys::Keys;
pub use shop_cache::testing::{Fixture, Server};
use shop_testkit::TestRedis;

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
