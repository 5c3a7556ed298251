//! The one Redis handle a process shares, for one node or a cluster: a
//! multiplexed, reconnecting `ConnectionManager` behind a circuit breaker, or
//! redis-rs's `ClusterConnection` (slot routing, `MOVED`/`ASK` redirects, new
//! topology after a failover). Everything above takes a [`RedisConn`] and works on
//! either.
//!
//! Why the breaker: when Redis goes away, every command waits for the manager's
//! reconnection attempts and timeouts (a drill measured about 2 s per command, two
//! commands per item page, so 7,500 page views/s fell to about 40/s). The pages do
//! not need Redis to be served (the page cache and the session layer fall back to
//! the database and a guest session), so waiting for it is the whole cost. Once a
//! command fails because Redis is unreachable (I/O error, timeout, dropped
//! connection), the breaker opens: for [`BACKOFF`] every command fails at once with
//! an I/O error, without touching the network. Then one command is let through as a
//! probe (the others keep failing fast); its success closes the breaker, its failure
//! opens it for another back-off. Errors Redis answers with (a wrong type, a script
//! error) say nothing about reachability and leave the breaker alone. A command
//! that times out (2 s) counts as unreachable: a Redis stalled that long (a huge
//! script, a fork stall) is treated as down for a quarter second, which costs 503s
//! on writes for that long and spares every other request the same wait.
//!
//! Every clone of a [`RedisConn`] shares one breaker, so the session layer, the page
//! cache and the carts learn together that Redis is down.
//!
//! On a cluster there is no breaker: a cluster is not down as a whole when one node
//! is, and failing every command fast because one primary is failing over would turn
//! a partial outage of a few seconds into a total one. The cluster client's own
//! retries (a few, short: [`CLUSTER_RETRIES`]) wait for the replica's promotion. A
//! dead node refuses connections, so its commands fail fast by themselves; a node
//! that is stalled or cut off without a reset costs each command to it the 2 s
//! time-out (measured: 4 s per item page with every node stopped by `SIGSTOP`). A
//! per-node breaker fixed that but, over redis-rs's failover handling, turned some
//! failovers into long runs of errors; it is the open item here. A cluster
//! connection whose commands time out is rebuilt (see `ClusterHandle`).
//!
//! Pipelines on a cluster: redis-rs sends a pipeline to one node and refuses one
//! whose commands hash to different slots. The shop's pipelines are not
//! transactions (those keep to one slot by the key layout), so [`RedisConn`] splits
//! such a pipeline by slot, keeps the order within each slot, sends the parts at
//! once and puts the answers back in order: callers write one pipeline for both.
//!
//! Scripts: `redis::Script` runs `EVALSHA` and, on `NOSCRIPT`, loads the script
//! (`SCRIPT LOAD` goes to every primary on a cluster) and runs it again, so a node
//! that never saw a script, or a replica just promoted, learns it on first use.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::Slot;
use redis::{Arg, Cmd, ErrorKind, Pipeline, RedisError, RedisFuture, Value};

use crate::CacheError;

/// How long one command may take before it fails with a timeout. Generous: the
/// cleaner's script over a large batch takes milliseconds, a page read microseconds.
const RESPONSE_TIMEOUT: Duration = Duration::from_secs(2);
/// How long one connection attempt may take.
const CONNECTION_TIMEOUT: Duration = Duration::from_secs(1);
/// Reconnection attempts per failure before an error is returned to the caller; the
/// next command starts a new round, so the handle recovers whenever Redis returns.
/// One: the breaker already spaces the attempts during an outage, and each retry
/// here is a wait the probing request makes its client sit through (three retries
/// measured about 0.9 s per probe in the Redis-outage drill).
const RECONNECT_RETRIES: usize = 1;
/// How long the breaker fails commands at once after Redis was found unreachable,
/// before one probe is let through. Short, so service is back well within a second
/// of Redis returning; long enough that an outage costs one probe per quarter second
/// instead of a timeout per request.
pub const BACKOFF: Duration = Duration::from_millis(250);
/// How many times the cluster client retries a command that met a moved slot, a
/// lost node or a failover in progress, waiting [`CLUSTER_RETRY_WAIT`] growing
/// between tries: enough to ride out a promotion (about two node time-outs), short
/// enough that a request does not hang on a cluster that is gone.
pub const CLUSTER_RETRIES: u32 = 6;
/// The shortest and longest wait between the cluster client's retries (ms).
const CLUSTER_RETRY_WAIT: (u64, u64) = (50, 1_000);

/// What a command failed fast with reads as this (see [`is_failing_fast`]).
const FAILING_FAST: &str = "redis is unreachable; failing fast until the next probe";

/// True for the error of a command the breaker failed at once: Redis is already
/// known to be down and was already logged, so callers log these quietly (during an
/// outage every request meets one).
pub fn is_failing_fast(e: &RedisError) -> bool {
    e.kind() == ErrorKind::Io && e.to_string().contains(FAILING_FAST)
}

/// A cloneable Redis handle: one multiplexed connection per process, reconnecting,
/// failing fast while Redis is known to be unreachable (see the module docs).
#[derive(Clone)]
pub struct RedisConn {
    inner: Inner,
    breaker: Arc<Breaker>,
}

#[derive(Clone)]
enum Inner {
    Node(Arc<NodePool>),
    Cluster(Arc<ClusterHandle>),
}

/// How many connections a handle to one node keeps by default (see [`NodePool`]).
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
struct NodePool {
    conns: Vec<ConnectionManager>,
    next: std::sync::atomic::AtomicUsize,
}

impl NodePool {
    fn pick(&self) -> ConnectionManager {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        self.conns[n % self.conns.len()].clone()
    }
}

/// A cluster connection that is replaced when it stops answering.
///
/// Why: in the failover drill, redis-rs 1.8's cluster connection sometimes began a
/// slot refresh during the promotion that never completed, and from then on every
/// command on it timed out, for good (about one run in five; logged "beginning slot
/// refresh" with no "complete"). A fresh connection discovers the slots anew and
/// works at once. So a command that times out has a new connection built in the
/// background (at most one at a time, at most one per [`CLUSTER_REBUILD_EVERY`]);
/// the commands after it use the new one. In-flight commands finish on the old one.
struct ClusterHandle {
    client: redis::cluster::ClusterClient,
    conn: std::sync::RwLock<ClusterConnection>,
    rebuilding: AtomicBool,
    /// Milliseconds since `epoch` of the last rebuild's start.
    last_rebuild_ms: AtomicU64,
    epoch: Instant,
    rebuilds: AtomicU64,
}

/// The least time between two rebuilds of a cluster connection.
const CLUSTER_REBUILD_EVERY: Duration = Duration::from_secs(1);

impl ClusterHandle {
    fn conn(&self) -> ClusterConnection {
        self.conn.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Learns from a command's outcome: a time-out starts a rebuild.
    fn record<T>(self: &Arc<Self>, result: &Result<T, RedisError>) {
        if !matches!(result, Err(e) if e.is_timeout()) {
            return;
        }
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
            match fresh {
                Ok(Ok(conn)) => {
                    *handle.conn.write().unwrap_or_else(|e| e.into_inner()) = conn;
                    handle.rebuilds.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!("redis cluster connection timed out; replaced it");
                }
                Ok(Err(error)) => {
                    tracing::warn!(%error, "could not rebuild the cluster connection")
                }
                Err(_) => tracing::warn!("rebuilding the cluster connection timed out"),
            }
            handle.rebuilding.store(false, Ordering::Release);
        });
    }
}

impl RedisConn {
    /// How many times a cluster connection that stopped answering was replaced.
    pub fn cluster_rebuilds(&self) -> u64 {
        match &self.inner {
            Inner::Node(_) => 0,
            Inner::Cluster(handle) => handle.rebuilds.load(Ordering::Relaxed),
        }
    }

    /// True when this handle talks to a Redis Cluster.
    pub fn is_cluster(&self) -> bool {
        matches!(self.inner, Inner::Cluster(_))
    }

    /// True while the breaker is open: Redis was found unreachable and commands fail
    /// at once (for `/healthz` and `/metrics`).
    pub fn is_failing_fast(&self) -> bool {
        self.breaker.open_until_ms.load(Ordering::Acquire) != 0
    }

    /// How many times the breaker opened since the process started.
    pub fn trips(&self) -> u64 {
        self.breaker.trips.load(Ordering::Relaxed)
    }

    /// How many commands failed at once because the breaker was open.
    pub fn fast_failures(&self) -> u64 {
        self.breaker.fast_failures.load(Ordering::Relaxed)
    }
}

/// Connects to `url` (`redis://host:port/db` or `unix:///path/to/socket`) with the
/// shop's timeouts. Fails if Redis does not answer now; later outages are survived.
pub async fn connect(url: &str) -> Result<RedisConn, CacheError> {
    connect_pooled(url, default_config(), DEFAULT_POOL).await
}

/// [`connect`] with a caller's configuration (tests shorten the timeouts).
pub async fn connect_with(
    url: &str,
    config: ConnectionManagerConfig,
) -> Result<RedisConn, CacheError> {
    connect_pooled(url, config, DEFAULT_POOL).await
}

/// [`connect_with`] keeping `pool` connections (at least one) used in turn.
pub async fn connect_pooled(
    url: &str,
    config: ConnectionManagerConfig,
    pool: usize,
) -> Result<RedisConn, CacheError> {
    let client = redis::Client::open(url)?;
    let mut conns = Vec::with_capacity(pool.max(1));
    for _ in 0..pool.max(1) {
        conns.push(ConnectionManager::new_with_config(client.clone(), config.clone()).await?);
    }
    Ok(RedisConn {
        inner: Inner::Node(Arc::new(NodePool {
            conns,
            next: Default::default(),
        })),
        breaker: Arc::new(Breaker::new(BACKOFF)),
    })
}

/// Connects to the Redis Cluster that `seeds` (`host:port` or `redis://host:port`,
/// any of its nodes) belong to, with the shop's timeouts. Fails if none answers now.
pub async fn connect_cluster(seeds: &[String]) -> Result<RedisConn, CacheError> {
    let urls = seeds.iter().map(|seed| {
        if seed.contains("://") {
            seed.clone()
        } else {
            format!("redis://{seed}")
        }
    });
    let client = redis::cluster::ClusterClient::builder(urls)
        .connection_timeout(CONNECTION_TIMEOUT)
        .response_timeout(RESPONSE_TIMEOUT)
        .retries(CLUSTER_RETRIES)
        .min_retry_wait(CLUSTER_RETRY_WAIT.0)
        .max_retry_wait(CLUSTER_RETRY_WAIT.1)
        .build()?;
    Ok(RedisConn {
        inner: Inner::Cluster(Arc::new(ClusterHandle {
            conn: std::sync::RwLock::new(client.get_async_connection().await?),
            client,
            rebuilding: AtomicBool::new(false),
            last_rebuild_ms: AtomicU64::new(0),
            epoch: Instant::now(),
            rebuilds: AtomicU64::new(0),
        })),
        breaker: Arc::new(Breaker::new(BACKOFF)),
    })
}

/// The shop's connection settings (timeouts, one reconnection retry), for
/// [`connect_pooled`].
pub fn default_config() -> ConnectionManagerConfig {
    ConnectionManagerConfig::new()
        .set_response_timeout(Some(RESPONSE_TIMEOUT))
        .set_connection_timeout(Some(CONNECTION_TIMEOUT))
        .set_number_of_retries(RECONNECT_RETRIES)
        .set_max_delay(Duration::from_millis(500))
}

impl ConnectionLike for RedisConn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        Box::pin(async move {
            match &mut self.inner {
                Inner::Node(pool) => {
                    let admitted = self.breaker.admit()?;
                    let result = pool.pick().req_packed_command(cmd).await;
                    admitted.record(result.as_ref().err());
                    result
                }
                Inner::Cluster(handle) => {
                    let result = handle.conn().req_packed_command(cmd).await;
                    handle.record(&result);
                    result
                }
            }
        })
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        Box::pin(async move {
            match &mut self.inner {
                Inner::Node(pool) => {
                    let admitted = self.breaker.admit()?;
                    let result = pool
                        .pick()
                        .req_packed_commands(pipeline, offset, count)
                        .await;
                    admitted.record(result.as_ref().err());
                    result
                }
                Inner::Cluster(handle) => {
                    // A transaction (offset > 0) is sent as it is: it must be one slot.
                    let parts = if pipeline.is_transaction() || offset != 0 {
                        None
                    } else {
                        split_by_slot(pipeline)
                    };
                    let mut inner = handle.conn();
                    let result = match parts {
                        None => inner.req_packed_commands(pipeline, offset, count).await,
                        Some(parts) => run_parts(&inner, parts, count).await,
                    };
                    handle.record(&result);
                    result
                }
            }
        })
    }

    fn get_db(&self) -> i64 {
        match &self.inner {
            Inner::Node(pool) => pool.conns[0].get_db(),
            Inner::Cluster(handle) => handle.conn().get_db(),
        }
    }
}

/// One slot's share of a split pipeline: its commands, in order, and where their
/// answers go in the whole pipeline's answer.
struct Part {
    pipeline: Pipeline,
    positions: Vec<usize>,
}

/// The parts of a pipeline whose commands span more than one slot, or `None` when
/// it can go as it is. Keyless commands (`TIME`) go with the first part.
fn split_by_slot(pipeline: &Pipeline) -> Option<Vec<Part>> {
    let slots: Vec<Option<Slot>> = pipeline
        .cmd_iter()
        .map(|cmd| first_key(cmd).map(Slot::for_key))
        .collect();
    let first = slots.iter().flatten().next().copied();
    if slots.iter().flatten().all(|slot| Some(*slot) == first) {
        return None;
    }
    let mut order: Vec<Option<Slot>> = Vec::new();
    let mut parts: Vec<Part> = Vec::new();
    for (position, (cmd, slot)) in pipeline.cmd_iter().zip(&slots).enumerate() {
        let slot = slot.or(first);
        let index = match order.iter().position(|s| *s == slot) {
            Some(index) => index,
            None => {
                order.push(slot);
                parts.push(Part {
                    pipeline: redis::pipe(),
                    positions: Vec::new(),
                });
                parts.len() - 1
            }
        };
        parts[index].pipeline.add_command(cmd.clone());
        parts[index].positions.push(position);
    }
    Some(parts)
}

/// Sends the parts at once and puts their answers back in pipeline order.
async fn run_parts(
    conn: &ClusterConnection,
    parts: Vec<Part>,
    count: usize,
) -> Result<Vec<Value>, RedisError> {
    let answers = futures::future::try_join_all(parts.iter().map(|part| {
        let mut conn = conn.clone();
        async move {
            conn.req_packed_commands(&part.pipeline, 0, part.positions.len())
                .await
        }
    }))
    .await?;
    let mut out = vec![Value::Nil; count];
    for (part, values) in parts.iter().zip(answers) {
        for (position, value) in part.positions.iter().zip(values) {
            out[*position] = value;
        }
    }
    Ok(out)
}

/// The key a command is routed by: its first key (after the script and key count
/// for `EVAL`/`EVALSHA`), none for the keyless commands the shop sends.
fn first_key(cmd: &Cmd) -> Option<&[u8]> {
    let mut args = cmd.args_iter().filter_map(|arg| match arg {
        Arg::Simple(bytes) => Some(bytes),
        _ => None,
    });
    let name = args.next()?;
    let is = |n: &str| name.eq_ignore_ascii_case(n.as_bytes());
    if is("EVALSHA") || is("EVAL") || is("EVALSHA_RO") || is("EVAL_RO") || is("FCALL") {
        let _script = args.next()?;
        let keys: usize = std::str::from_utf8(args.next()?).ok()?.parse().ok()?;
        return if keys == 0 { None } else { args.next() };
    }
    if [
        "TIME", "PING", "INFO", "SCRIPT", "DBSIZE", "CLUSTER", "CONFIG",
    ]
    .iter()
    .any(|n| is(n))
    {
        return None;
    }
    args.next()
}

/// The breaker's state, shared by every clone of a handle.
#[derive(Debug)]
struct Breaker {
    /// Milliseconds since `epoch` until which commands fail fast; 0 = closed.
    open_until_ms: AtomicU64,
    /// Bumped each time the breaker opens or closes. A command remembers the
    /// generation it was admitted in, so a late answer to a command sent before the
    /// last change cannot flip the state (a success from before an outage must not
    /// close the breaker in the middle of it; a timeout from before a recovery must
    /// not reopen it).
    generation: AtomicU64,
    /// A probe is in flight (only one at a time while open).
    probing: AtomicBool,
    epoch: Instant,
    backoff: Duration,
    trips: AtomicU64,
    fast_failures: AtomicU64,
}

/// A command let through. Only commands admitted while the breaker was closed, in
/// the current generation, may open it; only the probe may close it. Dropping the
/// probe (when its command finished, or when its caller gave up on it mid-way: a
/// client that went away, a request timeout) lets the next probe go, so a
/// cancelled probe cannot leave the breaker open for good.
#[derive(Debug)]
struct Admitted<'a> {
    breaker: &'a Breaker,
    generation: u64,
    probe: bool,
}

impl Admitted<'_> {
    /// Learns from the command's outcome.
    fn record(self, error: Option<&RedisError>) {
        let b = self.breaker;
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
                    b.trips.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(
                        error = %e,
                        "redis unreachable; failing fast, probing every {:?}",
                        b.backoff
                    );
                }
            }
            _ if self.probe => {
                b.open_until_ms.store(0, Ordering::Release);
                b.generation.fetch_add(1, Ordering::AcqRel);
                tracing::info!("redis answers again");
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
    fn new(backoff: Duration) -> Self {
        Self {
            open_until_ms: AtomicU64::new(0),
            generation: AtomicU64::new(0),
            probing: AtomicBool::new(false),
            epoch: Instant::now(),
            backoff,
            trips: AtomicU64::new(0),
            fast_failures: AtomicU64::new(0),
        }
    }

    fn now_ms(&self) -> u64 {
        // +1 so that "now" is never 0, the closed marker.
        self.epoch.elapsed().as_millis() as u64 + 1
    }

    /// Lets a command through, or fails it at once while the breaker is open.
    fn admit(&self) -> Result<Admitted<'_>, RedisError> {
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
        Err(RedisError::from((ErrorKind::Io, FAILING_FAST)))
    }
}

/// Does this error mean Redis could not be reached (rather than that it answered
/// with an error)?
fn unreachable(e: &RedisError) -> bool {
    e.is_io_error()
        || e.is_timeout()
        || e.is_connection_dropped()
        || e.is_connection_refusal()
        || e.is_unrecoverable_error()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn io_error() -> RedisError {
        RedisError::from(std::io::Error::from(std::io::ErrorKind::ConnectionRefused))
    }

    /// A breaker whose back-off is long enough never to end during a test: the
    /// back-off's end is simulated with [`expire`].
    fn breaker() -> Breaker {
        Breaker::new(Duration::from_secs(600))
    }

    fn expire(b: &Breaker) {
        b.open_until_ms.store(1, Ordering::Release);
    }

    fn trip(b: &Breaker) {
        b.admit().unwrap().record(Some(&io_error()));
    }

    #[test]
    fn opens_on_unreachable_and_fails_fast_until_the_backoff_ends() {
        let b = breaker();
        trip(&b);
        let fast = b.admit().expect_err("open: fail fast");
        assert!(is_failing_fast(&fast));
        assert!(!is_failing_fast(&io_error()));
        assert_eq!(b.trips.load(Ordering::Relaxed), 1);
        expire(&b);
        let probe = b.admit().expect("a probe after the back-off");
        assert!(probe.probe);
        assert!(b.admit().is_err(), "one probe at a time");
        probe.record(None);
        assert!(b.admit().is_ok(), "closed after a good probe");
        assert_eq!(b.open_until_ms.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn a_failed_probe_opens_it_again() {
        let b = breaker();
        trip(&b);
        expire(&b);
        b.admit().unwrap().record(Some(&io_error()));
        assert!(b.admit().is_err());
        assert_eq!(b.trips.load(Ordering::Relaxed), 1, "still the same outage");
    }

    #[test]
    fn answers_that_are_errors_do_not_open_it() {
        let b = breaker();
        let wrong_type = RedisError::from((ErrorKind::UnexpectedReturnType, "x"));
        b.admit().unwrap().record(Some(&wrong_type));
        assert!(b.admit().is_ok());
    }

    #[test]
    fn a_probe_given_up_on_lets_the_next_one_go() {
        let b = breaker();
        trip(&b);
        expire(&b);
        let probe = b.admit().unwrap();
        // The caller's future is dropped mid-command: nothing is recorded.
        drop(probe);
        let next = b.admit().expect("another probe, not a breaker stuck open");
        assert!(next.probe);
    }

    #[test]
    fn commands_are_routed_by_their_first_key() {
        let mut get = redis::cmd("GET");
        get.arg("cache:x");
        assert_eq!(first_key(&get), Some(&b"cache:x"[..]));
        let mut eval = redis::cmd("EVALSHA");
        eval.arg("abc")
            .arg(2)
            .arg("recent:{s1}")
            .arg("login:{s1}")
            .arg("v");
        assert_eq!(first_key(&eval), Some(&b"recent:{s1}"[..]));
        let mut keyless = redis::cmd("EVALSHA");
        keyless.arg("abc").arg(0).arg("v");
        assert_eq!(first_key(&keyless), None);
        assert_eq!(first_key(&redis::cmd("TIME")), None);
    }

    #[test]
    fn a_pipeline_over_several_slots_is_split_keeping_order_within_each() {
        let mut one_slot = redis::pipe();
        one_slot.get("a{t}").get("b{t}").cmd("TIME");
        assert!(
            split_by_slot(&one_slot).is_none(),
            "one slot: sent as it is"
        );

        let mut pipe = redis::pipe();
        pipe.cmd("TIME")
            .get("a{t}")
            .get("other")
            .set("b{t}", 1)
            .get("other");
        let parts = split_by_slot(&pipe).expect("two slots");
        assert_eq!(parts.len(), 2);
        assert_eq!(
            parts[0].positions,
            vec![0, 1, 3],
            "TIME joins the first slot"
        );
        assert_eq!(parts[1].positions, vec![2, 4]);
        let names: Vec<Vec<u8>> = parts[0]
            .pipeline
            .cmd_iter()
            .map(|c| match c.args_iter().next() {
                Some(Arg::Simple(n)) => n.to_vec(),
                _ => Vec::new(),
            })
            .collect();
        assert_eq!(
            names,
            vec![b"TIME".to_vec(), b"GET".to_vec(), b"SET".to_vec()]
        );
    }

    #[test]
    fn late_answers_from_before_a_change_do_not_flip_it() {
        let b = breaker();
        let slow_success = b.admit().unwrap();
        let slow_failure = b.admit().unwrap();
        trip(&b);
        slow_success.record(None);
        assert!(b.admit().is_err(), "a success sent before the outage");
        expire(&b);
        b.admit().unwrap().record(None);
        assert!(b.admit().is_ok(), "closed by the probe");
        slow_failure.record(Some(&io_error()));
        assert!(b.admit().is_ok(), "a failure sent before the recovery");
        assert_eq!(b.trips.load(Ordering::Relaxed), 1);
    }
}
