//! The cluster connection: its retry settings, and the handle that replaces a
//! connection that is stuck (its commands time out, or miss their budgets on
//! more than one primary at once).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use redis::RedisError;
use redis::cluster_async::ClusterConnection;

use super::{CONNECTION_TIMEOUT, RESPONSE_TIMEOUT};
use crate::repeating::Repeating;

/// `run`, locked (a panic elsewhere while it was held leaves it usable).
fn lock(run: &Mutex<Repeating>) -> MutexGuard<'_, Repeating> {
    run.lock().unwrap_or_else(|e| e.into_inner())
}

/// How many times the cluster client retries a command that met a moved slot, a
/// lost node or a failover in progress, waiting `CLUSTER_RETRY_WAIT` growing
/// between tries: enough to ride out a promotion (about two node time-outs), short
/// enough that a request does not hang on a cluster that is gone.
pub const CLUSTER_RETRIES: u32 = 6;
/// The shortest and longest wait between the cluster client's retries (ms).
pub(super) const CLUSTER_RETRY_WAIT: (u64, u64) = (50, 1_000);

/// A cluster connection that is replaced when it stops answering.
///
/// Why: in the failover drill, redis-rs 1.8's cluster connection sometimes began a
/// slot refresh during the promotion that never completed, and from then on every
/// command on it timed out, for good (about one run in five; logged "beginning slot
/// refresh" with no "complete"). A fresh connection discovers the slots anew and
/// works at once. The same when a primary dies (SIGKILL) under traffic: within
/// 200 ms the live primaries' commands missed their budgets too, and went on
/// missing them (for good in the drill, until a command's 2 s time-out) while
/// the node stayed dead. So a command that times out, or misses its budget
/// while more than one primary fails fast, has a new connection built in the
/// background (at most one at a time, at most one per [`CLUSTER_REBUILD_EVERY`]);
/// the commands after it use the new one. In-flight commands finish on the old one.
pub(super) struct ClusterHandle {
    pub(super) client: redis::cluster::ClusterClient,
    pub(super) conn: std::sync::RwLock<ClusterConnection>,
    pub(super) rebuilding: AtomicBool,
    /// Milliseconds since `epoch` of the last rebuild's start.
    pub(super) last_rebuild_ms: AtomicU64,
    pub(super) epoch: Instant,
    pub(super) rebuilds: AtomicU64,
    /// A breaker per primary, found by the slot map.
    pub(super) nodes: Arc<super::nodes::NodeBreakers>,
    /// The connection replaced, for the log (once a second while a primary
    /// is dead: a warning a minute at most; the run is never ended, the
    /// warning counts every rebuild).
    pub(super) replacing: Mutex<Repeating>,
    /// Rebuilds that failed (the whole cluster away), for the log; the run
    /// ends at the next command answered.
    pub(super) unbuilt: Mutex<Repeating>,
    /// A rebuild failed and no command was answered since.
    pub(super) unbuilt_open: AtomicBool,
}

/// The least time between two rebuilds of a cluster connection.
pub(super) const CLUSTER_REBUILD_EVERY: Duration = Duration::from_secs(1);

impl ClusterHandle {
    /// The breaker of the node serving `key` (none until the slot map is known).
    pub(super) fn breaker_of(
        &self,
        key: &[u8],
        conn: &ClusterConnection,
    ) -> Option<Arc<super::breaker::Breaker>> {
        self.nodes.of(super::nodes::slot_of(key), conn)
    }

    pub(super) fn conn(&self) -> ClusterConnection {
        self.conn.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Learns from a command's outcome: a time-out starts a rebuild, and so does
    /// a missed budget while more than one primary fails fast. One node failing
    /// is that node (stalled or gone: the others' commands go on); several at
    /// once is this connection stuck (see [`ClusterHandle`]).
    pub(super) fn record<T>(self: &Arc<Self>, result: &Result<T, RedisError>) {
        if result.is_ok()
            && self.unbuilt_open.load(Ordering::Relaxed)
            && self.unbuilt_open.swap(false, Ordering::AcqRel)
            && let Some((tries, lasted)) = lock(&self.unbuilt).ended(Instant::now())
        {
            tracing::info!(
                failed_rebuilds = tries,
                failing_for_ms = lasted.as_millis() as u64,
                "the redis cluster answers again"
            );
        }
        let why = match result {
            Err(e) if e.is_timeout() => "a command timed out",
            Err(e) if super::BudgetExceeded::is(e) && self.nodes.failing() > 1 => {
                "more than one primary missed its budget"
            }
            _ => return,
        };
        let now = self.epoch.elapsed().as_millis() as u64 + 1;
        let last = self.last_rebuild_ms.load(Ordering::Acquire);
        if (last != 0 && now < last + CLUSTER_REBUILD_EVERY.as_millis() as u64)
            || self
                .rebuilding
                .compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire)
                .is_err()
        {
            return;
        }
        self.last_rebuild_ms.store(now, Ordering::Release);
        let handle = self.clone();
        tokio::spawn(async move {
            let fresh = tokio::time::timeout(
                RESPONSE_TIMEOUT + CONNECTION_TIMEOUT,
                handle.client.get_async_connection(),
            )
            .await;
            let now = Instant::now();
            let fresh = match fresh {
                Ok(fresh) => fresh.map_err(|error| error.to_string()),
                Err(_) => Err("timed out".to_owned()),
            };
            match fresh {
                Ok(conn) => {
                    *handle.conn.write().unwrap_or_else(|e| e.into_inner()) = conn;
                    let rebuilds = handle.rebuilds.fetch_add(1, Ordering::Relaxed) + 1;
                    if lock(&handle.replacing).again(now) {
                        tracing::warn!(
                            rebuilds,
                            "redis cluster connection replaced: {why} (said again each minute it goes on)"
                        );
                    } else {
                        tracing::debug!(rebuilds, "redis cluster connection replaced: {why}");
                    }
                }
                Err(error) => {
                    handle.unbuilt_open.store(true, Ordering::Release);
                    let mut unbuilt = lock(&handle.unbuilt);
                    if unbuilt.again(now) {
                        tracing::warn!(
                            %error,
                            failed_tries = unbuilt.count(),
                            "could not rebuild the cluster connection (said again each minute it goes on)"
                        );
                    } else {
                        tracing::debug!(%error, "could not rebuild the cluster connection");
                    }
                }
            }
            handle.rebuilding.store(false, Ordering::Release);
        });
    }
}
