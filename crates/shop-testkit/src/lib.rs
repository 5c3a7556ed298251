//! Dev-only helpers for the shop's tests: real servers, one per test, never shared.
//!
//! [`TestRedis`] starts a private `redis-server` listening only on a Unix socket in
//! its own temporary directory, with persistence off, and kills it when dropped. A
//! test therefore cannot see another test's keys, nor the Redis on port 6379.

mod redis_server;

pub use redis_server::TestRedis;
