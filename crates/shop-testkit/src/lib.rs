//! Dev-only helpers for the shop's tests: real servers, one per test, never shared.
//!
//! [`TestRedis`] starts a private `redis-server` listening only on a Unix socket in
//! its own temporary directory, with persistence off, and kills it when dropped. A
//! test therefore cannot see another test's keys, nor the Redis on port 6379.
//! [`TestRedisCluster`] does the same for a six-node Redis Cluster (three primaries,
//! three replicas) on free loopback ports, for cluster routing and failover tests.
//! [`TestDb`] gives a test its own database: a SQLite file in a temporary directory,
//! or a PostgreSQL database created for it on the local server and dropped after.
//! [`SqliteWriteLock`] holds a SQLite file's write lock as another process would.
//! [`RunningExample`] runs a crate's example program against a test's Redis.
//! [`SmallDisk`] is a tmpfs of a few megabytes to fill up, for disk-full drills.
//! [`TestVarnish`] runs a private `varnishd` with the shop's VCL in front of a
//! test's web servers.

mod database;
mod dead_host;
mod example;
mod redis_cluster;
mod redis_server;
mod small_disk;
mod tcp_proxy;
mod varnish;

pub use database::{SqliteWalPin, SqliteWriteLock, TestDb};
pub use dead_host::DeadHost;
pub use example::{Reply, RunningExample};
pub use redis_cluster::TestRedisCluster;
pub use redis_server::TestRedis;
pub use small_disk::SmallDisk;
pub use tcp_proxy::TcpProxy;
pub use varnish::{SHOP_VCL, TestVarnish, VARNISHD_ENV};
