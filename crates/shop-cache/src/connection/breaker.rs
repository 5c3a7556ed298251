//! The circuit breaker every clone of a one-node handle shares (see the
//! [module](super) docs for why): closed, open for [`BACKOFF`], one probe.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use redis::RedisError;

/// How long the breaker fails commands at once after Redis was found unreachable,
/// before one probe is let through. Short, so service is back well within a second
/// of Redis returning; long enough that an outage costs one probe per quarter second
/// instead of a timeout per request.
pub const BACKOFF: Duration = Duration::from_millis(250);

/// How many budget misses in a row (no command answered in between) open the
/// breaker: one slow answer on a busy machine is not a stalled node, and a node
/// that stalls misses this many within its first budget (requests keep coming).
/// A refused or dropped connection opens it at once.
pub const MISSES_TO_OPEN: u64 = 3;

/// The breaker's state, shared by every clone of a handle.
#[derive(Debug)]
pub(super) struct Breaker {
    /// Milliseconds since `epoch` until which commands fail fast; 0 = closed.
    pub(super) open_until_ms: AtomicU64,
    /// Bumped each time the breaker opens or closes. A command remembers the
    /// generation it was admitted in, so a late answer to a command sent before the
    /// last change cannot flip the state (a success from before an outage must not
    /// close the breaker in the middle of it; a timeout from before a recovery must
    /// not reopen it).
    pub(super) generation: AtomicU64,
    /// A probe is in flight (only one at a time while open).
    pub(super) probing: AtomicBool,
    pub(super) epoch: Instant,
    pub(super) backoff: Duration,
    pub(super) trips: AtomicU64,
    pub(super) fast_failures: AtomicU64,
    /// Budget misses since a command last answered (of commands sent since the
    /// breaker last opened or closed).
    pub(super) misses: AtomicU64,
    /// The node it guards, for the log (a cluster's per-node breakers); none for
    /// a one-node handle's.
    pub(super) node: Option<String>,
}

/// A command let through. Only commands admitted while the breaker was closed, in
/// the current generation, may open it; only the probe may close it. Dropping the
/// probe (when its command finished, or when its caller gave up on it mid-way: a
/// client that went away, a request timeout) lets the next probe go, so a
/// cancelled probe cannot leave the breaker open for good.
#[derive(Debug)]
pub(super) struct Admitted<'a> {
    pub(super) breaker: &'a Breaker,
    pub(super) generation: u64,
    pub(super) probe: bool,
}

impl Admitted<'_> {
    /// Learns from the command's outcome.
    pub(super) fn record(self, error: Option<&RedisError>) {
        let b = self.breaker;
        if let Some(e) = error
            && !self.probe
            && super::BudgetExceeded::is(e)
        {
            // A miss of a command sent before the breaker last opened or
            // closed says nothing of the node now: not counted toward the
            // next opening (it could not open the breaker anyway).
            if self.generation != b.generation.load(Ordering::Acquire)
                || b.misses.fetch_add(1, Ordering::AcqRel) + 1 < MISSES_TO_OPEN
            {
                return;
            }
        }
        // Every answered command passes here: a store only when there is a count
        // to clear, so the hot path writes no shared cache line.
        if error.is_none() && b.misses.load(Ordering::Acquire) != 0 {
            b.misses.store(0, Ordering::Release);
        }
        match error {
            Some(e) if unreachable(e) => {
                let until = b.now_ms() + b.backoff.as_millis() as u64;
                if self.probe {
                    b.open_until_ms.store(until, Ordering::Release);
                } else if b
                    .generation
                    .compare_exchange(
                        self.generation,
                        self.generation + 1,
                        Ordering::AcqRel,
                        Ordering::Acquire,
                    )
                    .is_ok()
                {
                    b.open_until_ms.store(until, Ordering::Release);
                    b.misses.store(0, Ordering::Release);
                    b.trips.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(
                        error = %e,
                        node = b.node.as_deref().unwrap_or("redis"),
                        "redis unreachable; failing fast, probing every {:?}",
                        b.backoff
                    );
                }
            }
            _ if self.probe => {
                b.open_until_ms.store(0, Ordering::Release);
                b.misses.store(0, Ordering::Release);
                b.generation.fetch_add(1, Ordering::AcqRel);
                tracing::info!(
                    node = b.node.as_deref().unwrap_or("redis"),
                    "redis answers again"
                );
            }
            _ => {}
        }
    }
}

impl Drop for Admitted<'_> {
    fn drop(&mut self) {
        if self.probe {
            self.breaker.probing.store(false, Ordering::Release);
        }
    }
}

impl Breaker {
    pub(super) fn new(backoff: Duration) -> Self {
        Self {
            open_until_ms: AtomicU64::new(0),
            generation: AtomicU64::new(0),
            probing: AtomicBool::new(false),
            epoch: Instant::now(),
            backoff,
            trips: AtomicU64::new(0),
            fast_failures: AtomicU64::new(0),
            misses: AtomicU64::new(0),
            node: None,
        }
    }

    /// The same breaker, naming the node it guards in its log lines.
    pub(super) fn naming(mut self, node: &str) -> Self {
        self.node = Some(node.to_owned());
        self
    }

    /// Whether it fails commands at once now (or lets only a probe through).
    pub(super) fn is_open(&self) -> bool {
        self.open_until_ms.load(Ordering::Acquire) != 0
    }

    pub(super) fn now_ms(&self) -> u64 {
        // +1 so that "now" is never 0, the closed marker.
        self.epoch.elapsed().as_millis() as u64 + 1
    }

    /// Lets a command through, or fails it at once while the breaker is open.
    pub(super) fn admit(&self) -> Result<Admitted<'_>, RedisError> {
        let generation = self.generation.load(Ordering::Acquire);
        let until = self.open_until_ms.load(Ordering::Acquire);
        if until == 0 {
            return Ok(Admitted {
                breaker: self,
                generation,
                probe: false,
            });
        }
        if self.now_ms() >= until
            && self
                .probing
                .compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
        {
            return Ok(Admitted {
                breaker: self,
                generation,
                probe: true,
            });
        }
        self.fast_failures.fetch_add(1, Ordering::Relaxed);
        Err(crate::error::FailingFast::redis_error())
    }

    /// [`Breaker::admit`], and for the probe of a cluster node's breaker a
    /// connection of its own to the node first (within `budget`, at most
    /// [`PROBE_CONNECT`]): a node whose connection neither opens nor is
    /// refused in that time (a host gone) fails the probe without the command
    /// reaching the cluster client. There a command for a node it has no
    /// connection to rebuilds its slot map and connects to every node of the
    /// map while every other command of every node waits, and a connection to
    /// a host that is gone waits for its time-out: each probe of a dead host
    /// held every primary's commands for a second (their breakers opened in
    /// turn; `/healthz` said "down" with two live primaries of three:
    /// `FAULT=dead-host scripts/drill-stall`). A refused connection (a process
    /// gone, its host up) is refused at once there too, so the command goes as
    /// the probe, as it always did.
    pub(super) async fn admit_checked(
        &self,
        budget: Option<Duration>,
    ) -> Result<Admitted<'_>, RedisError> {
        let admitted = self.admit()?;
        let Some((host, port)) = self
            .node
            .as_deref()
            .filter(|_| admitted.probe)
            .and_then(probe_address)
        else {
            return Ok(admitted);
        };
        let wait = budget.map_or(PROBE_CONNECT, |budget| budget.min(PROBE_CONNECT));
        let connect = tokio::net::TcpStream::connect((host, port));
        if tokio::time::timeout(wait, connect).await.is_ok() {
            return Ok(admitted);
        }
        let gone = RedisError::from(std::io::Error::from(std::io::ErrorKind::TimedOut));
        admitted.record(Some(&gone));
        self.fast_failures.fetch_add(1, Ordering::Relaxed);
        Err(crate::error::FailingFast::redis_error())
    }
}

/// The host and port of a node's `host:port` name, where they name an
/// address to connect to (not an empty or wildcard host, which the cluster
/// client reads as the answering node's).
fn probe_address(node: &str) -> Option<(&str, u16)> {
    let (host, port) = node.rsplit_once(':')?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let port = port.parse().ok()?;
    match host {
        "" | "?" | "0.0.0.0" | "::" => None,
        host => Some((host, port)),
    }
}

/// How long the probe of a cluster node's breaker waits for a connection of
/// its own to the node ([`Breaker::admit_checked`]), at most: a connection in
/// a data centre opens in a millisecond, and a second is the cluster client's
/// own connection time-out, past which it would give up too.
pub(super) const PROBE_CONNECT: Duration = Duration::from_secs(1);

/// Does this error mean Redis could not be reached or cannot serve (rather than
/// that it answered with an error)? A Redis loading its data set after a
/// restart answers `LOADING` to every command for as long as the load takes:
/// as good as down, so its breaker opens (logged once) and its commands fail at
/// once until a probe finds it loaded.
pub(super) fn unreachable(e: &RedisError) -> bool {
    no_answer(e) || e.is_unrecoverable_error() || loading(e)
}

/// Is this Redis saying it is loading its data set (`LOADING`): up, but
/// serving nothing until the load is done.
pub(crate) fn loading(e: &RedisError) -> bool {
    e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::BusyLoading)
}

/// Did Redis give no answer at all: an I/O error (a missed budget is one), a
/// time-out, a refused or dropped connection? ([`crate::CacheError::is_unanswered`])
pub(crate) fn no_answer(e: &RedisError) -> bool {
    e.is_io_error() || e.is_timeout() || e.is_connection_dropped() || e.is_connection_refusal()
}
