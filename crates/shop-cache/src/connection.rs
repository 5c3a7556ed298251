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
//! error) say nothing about reachability and leave the breaker alone, but for
//! `LOADING` (Redis loading its data set after a restart: it serves nothing
//! until done), which opens it. A command
//! that times out (2 s) counts as unreachable: a Redis stalled that long (a huge
//! script, a fork stall) is treated as down for a quarter second, which costs 503s
//! on writes for that long and spares every other request the same wait.
//!
//! Every clone of a [`RedisConn`] shares one breaker, so the session layer, the page
//! cache and the carts learn together that Redis is down.
//!
//! A stall (a node that neither answers nor closes its connections: a fork, a
//! slow command) costs each command the 2 s time-out. The request path therefore
//! uses a handle with a budget ([`RedisConn::with_budget`], 100 ms in the shop):
//! a command past it fails, and [`MISSES_TO_OPEN`] misses in a row open
//! the breaker as an unreachable Redis does.
//!
//! On a cluster the breaker is per primary (`nodes.rs`): a command's first key
//! gives its slot, the cluster's slot map (read every [`TOPOLOGY_EVERY`]) its node.
//! A cluster is not down as a whole when one node is, so only the commands the
//! failing node serves fail fast; after a failover its slots are the replica's at
//! the next map read. A node's probe first connects to the node on its own
//! (`Breaker::admit_checked`): a node that takes no connection (a host gone)
//! fails it without the cluster client seeing the command, which would rebuild
//! its slot map and connect to every node while every other command waits.
//! The cluster client's own retries (a few, short: [`CLUSTER_RETRIES`]) wait
//! for the replica's promotion. A cluster connection
//! whose commands time out, or miss their budgets on more than one primary at
//! once, is rebuilt (see `ClusterHandle`).
//!
//! Pipelines on a cluster: redis-rs sends a pipeline to one node and refuses one
//! whose commands hash to different slots. The shop's pipelines are not
//! transactions (those keep to one slot by the key layout), so [`RedisConn`] splits
//! such a pipeline by slot, keeps the order within each slot, sends the parts at
//! once and puts the answers back in order: callers write one pipeline for both.
//! Each node the parts go to is asked through its own breaker (a pipeline that
//! needs a node failing fast fails at once, unless its handle asks every node:
//! [`RedisConn::asking_every_node`]; a missed budget is the slow node's).
//!
//! Scripts: `redis::Script` runs `EVALSHA` and, on `NOSCRIPT`, loads the script
//! (`SCRIPT LOAD` goes to every primary on a cluster) and runs it again, so a node
//! that never saw a script, or a replica just promoted, learns it on first use.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::{Cmd, Pipeline, RedisFuture, Value};

use crate::CacheError;
use cluster::CLUSTER_RETRY_WAIT;
use slots::{first_key, run_parts, split_by_slot};

mod breaker;
pub(crate) use breaker::{loading, no_answer};
mod cluster;
pub(crate) mod nodes;
mod pool;
mod slots;
#[cfg(test)]
mod tests;

use breaker::Breaker;
pub use breaker::{BACKOFF, MISSES_TO_OPEN};
pub use cluster::CLUSTER_RETRIES;
use cluster::ClusterHandle;
pub use nodes::TOPOLOGY_EVERY;
pub use pool::DEFAULT_POOL;
use pool::NodePool;

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

/// A cloneable Redis handle: one multiplexed connection per process, reconnecting,
/// failing fast while Redis is known to be unreachable (see the module docs).
#[derive(Clone)]
pub struct RedisConn {
    inner: Inner,
    /// One allocation for what every clone shares: a clone costs two reference
    /// counts (a profile of the cached view found clones of the handle's parts,
    /// one count each, among its costs).
    shared: Arc<Shared>,
    /// How long one command of this handle (not of its other clones) may take
    /// before it fails and counts against its node ([`RedisConn::with_budget`]);
    /// none: the connection's own time-out.
    budget: Option<Duration>,
    /// Whether this handle's pipelines over several nodes go to every node not
    /// failing fast even when one is ([`RedisConn::asking_every_node`]).
    every_node: bool,
}

/// The nodes failing fast at one moment ([`RedisConn::nodes_failing`]): a
/// node that missed a budgeted command's time or could not be reached, until
/// a probe gets through.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodesFailing {
    /// The nodes failing fast: `host:port` of a cluster's primaries, or
    /// `redis` for a one-node handle.
    pub failing: Vec<String>,
    /// How many nodes there are (1 for a one-node handle).
    pub of: usize,
}

impl NodesFailing {
    /// A cluster (as far as its slot map is known) some of whose nodes do not
    /// fail fast: what they serve is served, whatever the others do. Never a
    /// one-node handle.
    pub fn some_serve(&self) -> bool {
        self.of > 1 && self.failing.len() < self.of
    }
}

/// What a command that missed its handle's budget fails with (an I/O error, so
/// that its node's breaker counts it: the node did not answer in time).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("redis did not answer within the request's budget")]
pub struct BudgetExceeded;

impl BudgetExceeded {
    /// Is `e` a budget miss?
    pub(crate) fn is(e: &redis::RedisError) -> bool {
        crate::error::carries::<BudgetExceeded>(e)
    }
}

/// Runs `call` within `budget`, if any.
async fn within<T>(
    budget: Option<Duration>,
    call: impl std::future::Future<Output = redis::RedisResult<T>>,
) -> redis::RedisResult<T> {
    match budget {
        None => call.await,
        Some(budget) => tokio::time::timeout(budget, call)
            .await
            .unwrap_or_else(|_| Err(std::io::Error::other(BudgetExceeded).into())),
    }
}

/// An answer that may be Redis saying `LOADING`: it is loading its data set
/// after a restart (seconds a gigabyte) and answers every command so. The
/// connection hands that over as an answer (a [`Value::ServerError`]); the
/// handle makes it the error it is, so the breaker sees Redis unable to serve
/// (`breaker::unreachable`) and requests fail fast, not each meeting it.
trait Answer: Sized {
    fn loading(&self) -> Option<redis::RedisError>;
}

impl Answer for Value {
    fn loading(&self) -> Option<redis::RedisError> {
        match self {
            Value::ServerError(e) => Some(redis::RedisError::from(e.clone())).filter(loading),
            _ => None,
        }
    }
}

impl Answer for Vec<Value> {
    fn loading(&self) -> Option<redis::RedisError> {
        self.iter().find_map(Answer::loading)
    }
}

/// `call` within `budget`, through `breaker` where there is one: admitted (or
/// failed at once while it is open), then told how the call went.
async fn guarded<T: Answer>(
    breaker: Option<&Breaker>,
    budget: Option<Duration>,
    call: impl std::future::Future<Output = redis::RedisResult<T>>,
) -> redis::RedisResult<T> {
    let admitted = match breaker {
        Some(breaker) => Some(breaker.admit_checked(budget).await?),
        None => None,
    };
    let result = within(budget, call)
        .await
        .and_then(|answer| match answer.loading() {
            Some(loading) => Err(loading),
            None => Ok(answer),
        });
    if let Some(admitted) = admitted {
        admitted.record(result.as_ref().err());
    }
    result
}

/// What every clone of a [`RedisConn`] shares besides the connection.
struct Shared {
    breaker: Breaker,
    /// Where a subscription goes: the node's URL, or the cluster's seeds (any node
    /// hears every `PUBLISH` of a cluster).
    subscribe_to: Vec<String>,
    /// Commands sent through this handle and its clones (a pipeline counts each of
    /// its commands; a script call is one, whatever it runs inside Redis).
    sent: AtomicU64,
}

#[derive(Clone)]
enum Inner {
    Node(Arc<NodePool>),
    Cluster(Arc<ClusterHandle>),
}

impl RedisConn {
    /// A clone whose commands fail once they take longer than `budget` (a
    /// request's Redis work: a page lookup, a session touch, a cart), counted
    /// against their node: on one node the handle's breaker opens, on a cluster
    /// the breaker of the node serving the command's key, and the commands that
    /// node serves fail at once until a probe gets through, while the other
    /// nodes' go on. The command itself may still run when the node wakes up
    /// (it was sent): callers treat a budget miss as "not known to be done".
    /// Other clones keep their own time-out (daemons, commands).
    pub fn with_budget(&self, budget: Duration) -> RedisConn {
        RedisConn {
            budget: Some(budget),
            ..self.clone()
        }
    }

    /// A clone for a read that must reach every node (the health check): a
    /// pipeline over several nodes of a cluster is sent to each node that does
    /// not fail fast even when another does, so each node is asked and its
    /// breaker learns from its own answer. The pipeline still fails when a part
    /// does (a node failing fast fails its part at once). Other clones send
    /// nothing when one node of a pipeline fails fast (a write is not sent in
    /// part). One node: no difference.
    pub fn asking_every_node(&self) -> RedisConn {
        RedisConn {
            every_node: true,
            ..self.clone()
        }
    }

    /// The nodes failing fast now (breaker open: their commands fail at once),
    /// and how many nodes there are, from one look at the breakers.
    pub fn nodes_failing(&self) -> NodesFailing {
        match &self.inner {
            Inner::Node(_) => NodesFailing {
                failing: match self.is_failing_fast() {
                    true => vec!["redis".to_owned()],
                    false => Vec::new(),
                },
                of: 1,
            },
            Inner::Cluster(handle) => {
                let (failing, of) = handle.nodes.failing_of_all();
                NodesFailing { failing, of }
            }
        }
    }

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
        self.shared.breaker.open_until_ms.load(Ordering::Acquire) != 0
    }

    /// How many times the breaker opened since the process started.
    pub fn trips(&self) -> u64 {
        self.shared.breaker.trips.load(Ordering::Relaxed)
    }

    /// How many commands failed at once because the breaker was open.
    pub fn fast_failures(&self) -> u64 {
        self.shared.breaker.fast_failures.load(Ordering::Relaxed)
    }

    /// How many commands this handle (and every clone) has sent, for `/metrics`:
    /// what the web tier costs Redis in requests, per page view.
    pub fn commands_sent(&self) -> u64 {
        self.shared.sent.load(Ordering::Relaxed)
    }

    /// A connection of its own subscribed to `channel`, on the node (or the first
    /// cluster node that answers): pub/sub needs a connection that does nothing
    /// else. It is not reconnected: the caller learns from the stream's end that
    /// messages may have been missed, and subscribes again.
    pub async fn subscribe(
        &self,
        channel: &str,
    ) -> Result<(redis::aio::PubSubSink, redis::aio::PubSubStream), CacheError> {
        let mut last = None;
        for url in self.shared.subscribe_to.iter() {
            let attempt = async {
                let client = redis::Client::open(url.as_str())?;
                let mut pubsub =
                    tokio::time::timeout(CONNECTION_TIMEOUT, client.get_async_pubsub())
                        .await
                        .map_err(|_| {
                            redis::RedisError::from(std::io::Error::from(
                                std::io::ErrorKind::TimedOut,
                            ))
                        })??;
                pubsub.subscribe(channel).await?;
                Ok::<_, redis::RedisError>(pubsub.split())
            };
            match attempt.await {
                Ok(split) => return Ok(split),
                Err(error) => last = Some(error),
            }
        }
        Err(CacheError::Redis(last.unwrap_or_else(|| {
            std::io::Error::other("no Redis to subscribe to").into()
        })))
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
        shared: Arc::new(Shared {
            breaker: Breaker::new(BACKOFF),
            subscribe_to: vec![url.to_owned()],
            sent: AtomicU64::new(0),
        }),
        budget: None,
        every_node: false,
    })
}

/// Connects to the Redis Cluster that `seeds` (`host:port` or `redis://host:port`,
/// any of its nodes) belong to, with the shop's timeouts. Fails if none answers now.
pub async fn connect_cluster(seeds: &[String]) -> Result<RedisConn, CacheError> {
    let urls: Vec<String> = seeds
        .iter()
        .map(|seed| {
            if seed.contains("://") {
                seed.clone()
            } else {
                format!("redis://{seed}")
            }
        })
        .collect();
    let client = redis::cluster::ClusterClient::builder(urls.clone())
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
            nodes: Arc::default(),
            replacing: Default::default(),
            unbuilt: Default::default(),
            unbuilt_open: AtomicBool::new(false),
        })),
        shared: Arc::new(Shared {
            breaker: Breaker::new(BACKOFF),
            subscribe_to: urls,
            sent: AtomicU64::new(0),
        }),
        budget: None,
        every_node: false,
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
        self.shared.sent.fetch_add(1, Ordering::Relaxed);
        Box::pin(async move {
            match &mut self.inner {
                Inner::Node(pool) => {
                    let breaker = Some(&self.shared.breaker);
                    guarded(breaker, self.budget, pool.pick().req_packed_command(cmd)).await
                }
                Inner::Cluster(handle) => {
                    let mut conn = handle.conn();
                    let node = first_key(cmd).and_then(|key| handle.breaker_of(key, &conn));
                    let result =
                        guarded(node.as_deref(), self.budget, conn.req_packed_command(cmd)).await;
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
        self.shared
            .sent
            .fetch_add(pipeline.cmd_iter().count() as u64, Ordering::Relaxed);
        Box::pin(async move {
            match &mut self.inner {
                Inner::Node(pool) => {
                    let mut conn = pool.pick();
                    let sent = conn.req_packed_commands(pipeline, offset, count);
                    guarded(Some(&self.shared.breaker), self.budget, sent).await
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
                        // One slot: its node's breaker, as for one command.
                        None => {
                            let node = pipeline
                                .cmd_iter()
                                .find_map(first_key)
                                .and_then(|key| handle.breaker_of(key, &inner));
                            let sent = inner.req_packed_commands(pipeline, offset, count);
                            guarded(node.as_deref(), self.budget, sent).await
                        }
                        Some(parts) => {
                            let (budget, every) = (self.budget, self.every_node);
                            run_parts(handle, &inner, budget, every, parts, count).await
                        }
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
