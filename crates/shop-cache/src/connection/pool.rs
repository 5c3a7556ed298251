//! A few multiplexed connections to one node, used in turn.

use std::sync::atomic::Ordering;

use redis::aio::ConnectionManager;

/// How many connections a handle to one node keeps by default (see `NodePool`).
pub const DEFAULT_POOL: usize = 1;

/// A few multiplexed connections to one node, used in turn.
///
/// Why more than one could help: a multiplexed connection has one task that writes
/// every caller's commands and one that reads every answer, so under load the
/// callers queue behind that pair. Why the default is one: that pair was not the
/// limit on one machine (Redis's CPU was), and over HTTP more connections were
/// slower, since one connection coalesces more commands into each `writev` than
/// four (BENCHMARKS.md, `--redis-pool`). A pool
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
