//! Integration tests of the Redis layer, each against its own `redis-server`.

mod analytics;
mod cart;
mod cleaner;
mod insights;
mod outage;
mod session;

use shop_cache::RedisConn;
use shop_cache::keys::Keys;
use shop_testkit::TestRedis;

/// A fresh server and the shop's connection to it.
pub async fn redis() -> (TestRedis, RedisConn) {
    let server = TestRedis::start();
    let conn = shop_cache::connect(&server.url()).await.unwrap();
    (server, conn)
}

/// The book's key layout, which the assertions below spell out literally.
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
