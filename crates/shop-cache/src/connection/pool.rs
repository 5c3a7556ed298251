//! A few multiplexed connections to one node, used in turn.

use std::sync::atomic::Ordering;

use redis::aio::ConnectionManager;

/// How many connections a handle to one node keeps by default (see `NodePool`).
pub const DEFAULT_POOL: usize = 1;

/// A few multiplexed connections to one node, used in turn.
///
/// Why more than one could help: a multiplexed connection has one task that writes
/// every caller's commands and one that reads every answer, so under load the
/// callers queue behind that pair. Why the default is one: measured, that pair was
/// not the limit. `bench throughput` (session touch from 50 concurrent callers,
/// 2026-11-23) found a pool of 4 no faster than one connection (Redis's CPU was the
/// limit), and `scripts/bench-views` found it slower over HTTP: a profile of
/// `shop serve` spent a fifth of its CPU writing to Redis, one `writev` per flush,
/// and one connection coalesces more commands into each flush than four. A pool
/// (`--redis-pool`) is for a Redis on another machine, where the round trip, not
/// the CPU, is the limit. Commands of one caller stay in order (a caller awaits
/// each answer before the next command); commands of different callers were never
/// ordered.
pub(super) struct NodePool {
    pub(super) conns: Vec<ConnectionManager>,
    pub(super) next: std::sync::atomic::AtomicUsize,
}

impl NodePool {
    pub(super) fn pick(&self) -> ConnectionManager {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        self.conns[n % self.conns.len()].clone()
    }
}
