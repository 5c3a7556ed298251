//! `GET /healthz`: whether this server can do its whole job, for load balancers,
//! orchestrators and people.
//!
//! The public answer says only the status,
//! `{"status": "ok"|"degraded"|"read_only"|"down"|"draining"}` (`"draining"`
//! while a stopping server goes on serving for `--drain-seconds`, so the
//! balancer takes it out first; `"down"` too while Redis does not answer,
//! `"degraded"` while some of a cluster's nodes fail fast or do not answer,
//! stalled or gone, and others
//! do: every web server sees the same nodes, and taking them all out would
//! drop what the other nodes still serve): which part failed is for the
//! operators, on the internal listener ([`crate::internal_router`]), whose
//! `/healthz` answers `{"status": .., "redis": true|false, "redis_failing_nodes":
//! [..], "database": ..}` (`redis`: every node answered the check; the nodes,
//! `host:port` on a cluster, whose commands fail at once now after one missed
//! a request's budget). The
//! database's states:
//! - `"ok"`: the database answers reads (`SELECT 1` on the read pool) and a write
//!   commits now ([`shop_db::Db::probe_write`]: a one-row update on the write
//!   connection, on SQLite with a 100 ms busy wait, after waiting at most 300 ms
//!   for that connection, so a write queue that long counts as failing);
//! - `"degraded"`: reads work but the probe's write did not commit: it waited too
//!   long (a write queue, a lock held elsewhere), or writes have been refused for
//!   less than the write grace ([`WebConfig::write_grace`](crate::WebConfig::write_grace),
//!   10 s by default). Pages and logins still work; checkouts may answer 503;
//! - `"read_only"`: writes have been refused (a full disk, a read-only file system
//!   or server, a lost primary; not a wait) for longer than the grace, with no
//!   write of the shop's own committing in between: this server cannot take
//!   orders;
//! - `"down"`: reads fail too.
//!
//! The status is 200 for `"ok"` and `"degraded"`, and 503 (with `Retry-After`) for
//! `"read_only"`, `"down"` or Redis down, so a load balancer sends shoppers to the
//! servers that can take their orders. A short write failure stays 200: a lock
//! held for a second degrades every server at once, and taking them all out would
//! drop the pages and carts that still work. The state clears by itself at the
//! first health check whose write commits.
//!
//! The result is computed at most once a second, by one request at a time; the
//! others get that answer. Any client may call `/healthz`, and each write probe
//! takes the database's write connection for a moment: unthrottled, a flood of
//! health checks would crowd out checkouts.
//!
//! A server does not wait to be asked to learn that Redis stopped answering:
//! its [`HealthWatch`] asks every node about once a second (the Redis part of
//! the check, no database probe), so the breakers of nodes that stopped
//! answering open after three missed looks (see `shop_cache::connection`),
//! about five seconds into a stall, even on a server with no traffic, and a
//! balancer's next look says so.

use std::time::Duration;
use std::time::Instant;

use axum::extract::State;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use serde_json::json;

use shop_cache::NodesFailing;

use crate::AppState;

/// How long writes may fail before `/healthz` answers 503 (`"read_only"`).
pub const DEFAULT_WRITE_GRACE: Duration = Duration::from_secs(10);

/// The longest any one probe may take before it counts as failed.
const PROBE_TIMEOUT: Duration = Duration::from_secs(1);

/// The public health route: the status only.
pub fn router(state: AppState) -> Router {
    Router::new()
        .route("/healthz", get(healthz))
        .with_state(state)
}

/// The internal health route: the status and which part is failing.
pub fn detailed_router(state: AppState) -> Router {
    Router::new()
        .route("/healthz", get(healthz_detailed))
        .with_state(state)
}

/// The database's state as `/healthz` reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Database {
    /// Reads and writes work.
    Ok,
    /// Reads work; writes have failed for less than the write grace.
    Degraded,
    /// Reads work; writes have failed for longer than the write grace.
    ReadOnly,
    /// Reads fail.
    Down,
}

impl Database {
    fn as_str(self) -> &'static str {
        match self {
            Database::Ok => "ok",
            Database::Degraded => "degraded",
            Database::ReadOnly => "read_only",
            Database::Down => "down",
        }
    }
}

/// True when `probe` succeeds within [`PROBE_TIMEOUT`].
async fn passes<T, E>(probe: impl Future<Output = Result<T, E>>) -> bool {
    matches!(tokio::time::timeout(PROBE_TIMEOUT, probe).await, Ok(Ok(_)))
}

/// What the Redis check (the sessions' count, on every node) found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum RedisCheck {
    /// Every node answered.
    Answered,
    /// A node did not answer: not in time, or it fails fast since it did not,
    /// or it could not be reached (a stalled or a dead node).
    Unanswered,
    /// Redis answered with an error (a wrong password, a cluster without all
    /// its slots, a script's error).
    Failed,
}

/// The Redis check, and the error Redis answered with when it
/// [`RedisCheck::Failed`]. Each node has the request budget to answer (at most
/// [`PROBE_TIMEOUT`]), and a node that misses it is charged with the miss; the
/// whole check ends within three times [`PROBE_TIMEOUT`].
async fn check_redis(state: &AppState) -> (RedisCheck, Option<String>) {
    let budget = state.config.redis_budget.min(PROBE_TIMEOUT);
    // Every node is asked, even with another failing fast: a stalled node
    // whose breaker lags the others' is asked until it opens.
    let redis = state.redis.with_budget(budget).asking_every_node();
    let sessions = state.sessions.over(redis);
    // The budget ends the check; this only bounds what it does not cover (a
    // probe's own connection to a node, at most the budget, before the parts
    // are sent with theirs).
    match tokio::time::timeout(3 * PROBE_TIMEOUT, sessions.count()).await {
        Ok(Ok(_)) => (RedisCheck::Answered, None),
        Err(_) => (RedisCheck::Unanswered, None),
        Ok(Err(error)) if error.is_unanswered() => (RedisCheck::Unanswered, None),
        Ok(Err(error)) => (RedisCheck::Failed, Some(error.to_string())),
    }
}

/// How long a computed health answer is reused; also how often the
/// [`HealthWatch`] asks Redis.
const FRESH_FOR: Duration = Duration::from_secs(1);

/// The daemon that asks Redis the health check's question a second
/// (`FRESH_FOR`) after its last answer, on its own: a node that does not
/// answer within a request's budget (at most `PROBE_TIMEOUT`) counts
/// against its breaker, as a request's miss does (three in a row open it).
///
/// Without it a server learned of a stall only from its own traffic and from
/// `/healthz` when asked: an idle server's breakers opened after three missed
/// looks, about 15 s of a stall behind a balancer that looks every 5 s, which
/// was told 200 `"degraded"` meanwhile. With it, about five seconds
/// (`scripts/drill-health`; the test `stall::an_idle_server_learns_of_a_stalled_cluster_without_being_asked`).
/// It reads no database and keeps no answer: a look at `/healthz` still makes
/// its own check, and sees the breakers as they are. Its cost: the check, one
/// pipeline of a `ZCARD` a shard (64 by default), a second per server.
///
/// `shop serve` runs one; an app that mounts the health routes itself runs
/// [`AppState::health_watch`] with `shop_cache::daemon::run`.
pub struct HealthWatch(AppState);

impl HealthWatch {
    /// The watch over `state`'s Redis.
    pub fn new(state: AppState) -> Self {
        Self(state)
    }

    /// One look: whether every node answered the check in time (`false` too for
    /// an error Redis answered with; `/healthz` says that one).
    pub async fn step(&self) -> bool {
        check_redis(&self.0).await.0 == RedisCheck::Answered
    }
}

impl shop_cache::daemon::Daemon for HealthWatch {
    const NAME: &'static str = "health-watch";
    type Error = std::convert::Infallible;

    async fn tick(&mut self) -> Result<Duration, Self::Error> {
        self.step().await;
        Ok(FRESH_FOR)
    }
}

/// The last health answer and when it was computed, and since when writes have
/// been failing; the lock makes one request at a time compute it. And whether
/// the server is draining ([`HealthCache::start_draining`]).
#[derive(Debug, Default)]
pub struct HealthCache {
    state: tokio::sync::Mutex<HealthState>,
    draining: std::sync::atomic::AtomicBool,
}

impl HealthCache {
    /// From now on `/healthz` (both listeners') answers 503 `"draining"`,
    /// whatever Redis and the database say, while the server goes on serving:
    /// the balancer in front stops sending it requests before it stops
    /// (`shop serve --drain-seconds`).
    pub fn start_draining(&self) {
        self.draining
            .store(true, std::sync::atomic::Ordering::Relaxed);
    }

    fn draining(&self) -> bool {
        self.draining.load(std::sync::atomic::Ordering::Relaxed)
    }
}

#[derive(Debug, Default)]
struct HealthState {
    last: Option<(Instant, RedisCheck, Database)>,
    /// Since when the write probe has been refused, with the database handle's
    /// commit count then: a write committed since (the shop's own traffic) shows
    /// the failure was not continuous, and restarts the clock.
    writes_failing: Option<(Instant, u64)>,
    /// Checks whose write did not commit, for the log (a warning a minute).
    unwritable: shop_cache::repeating::Repeating,
}

/// What the write probe found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Writes {
    /// A write committed.
    Commit,
    /// A write only waited too long (the write queue, a lock held elsewhere, the
    /// probe's own time limit): the database takes writes, not this one now.
    Busy,
    /// A write was refused (a full disk, a read-only file or server, a lost
    /// connection).
    Refused,
}

/// Runs the write probe within [`PROBE_TIMEOUT`].
async fn probe_writes(state: &AppState) -> Writes {
    match tokio::time::timeout(PROBE_TIMEOUT, state.db.probe_write()).await {
        Ok(Ok(())) => Writes::Commit,
        Ok(Err(error)) if !error.is_busy() => Writes::Refused,
        _ => Writes::Busy,
    }
}

async fn check(state: &AppState) -> (RedisCheck, Database) {
    let mut health = state.health.state.lock().await;
    if let Some((at, redis, database)) = health.last
        && at.elapsed() < FRESH_FOR
    {
        return (redis, database);
    }
    let ((redis, answered), reads, writes) = tokio::join!(
        check_redis(state),
        passes(state.db.ping()),
        probe_writes(state),
    );
    let now = Instant::now();
    // An error Redis answers with is said where it begins and ends (its 503s
    // are not logged each: see `answer`); a node not answering is logged by
    // its breaker.
    let was_failed = health
        .last
        .is_some_and(|(_, redis, _)| redis == RedisCheck::Failed);
    match (was_failed, answered) {
        (false, Some(error)) => {
            tracing::warn!(%error, "health check: Redis answers with an error")
        }
        (true, None) => tracing::info!("health check: Redis no longer answers with an error"),
        _ => {}
    }
    let commits = state.db.commits();
    health.writes_failing = match (writes, health.writes_failing) {
        (Writes::Commit, _) => {
            if let Some((checks, lasted)) = health.unwritable.ended(now) {
                tracing::info!(
                    failed_checks = checks,
                    failing_for_ms = lasted.as_millis() as u64,
                    "health check: the database commits writes again"
                );
            }
            None
        }
        // A write went through since the clock started: start it again.
        (Writes::Refused, Some((_, then))) if commits > then => Some((now, commits)),
        (Writes::Refused, None) => Some((now, commits)),
        (_, failing) => failing,
    };
    let database = match (reads, writes, health.writes_failing) {
        (false, _, _) => Database::Down,
        (true, Writes::Commit, _) => Database::Ok,
        (true, _, Some((since, _))) if now - since >= state.config.write_grace => {
            Database::ReadOnly
        }
        (true, _, _) => Database::Degraded,
    };
    if writes != Writes::Commit {
        let failing_for_ms = health
            .writes_failing
            .map_or(0, |(since, _)| (now - since).as_millis() as u64);
        let refused = writes == Writes::Refused;
        if health.unwritable.again(now) {
            tracing::warn!(
                reads,
                refused,
                failing_for_ms,
                failed_checks = health.unwritable.count(),
                "health check: the database cannot commit a write (said again each minute it goes on)"
            );
        } else {
            tracing::debug!(
                reads,
                refused,
                failing_for_ms,
                "health check: the database cannot commit a write"
            );
        }
    }
    health.last = Some((now, redis, database));
    (redis, database)
}

/// Whether Redis serves, and the nodes failing fast now (one snapshot of the
/// breakers).
fn redis_serves(state: &AppState, check: RedisCheck) -> (bool, Vec<String>) {
    let nodes = state.redis.nodes_failing();
    (serves(check, &nodes), nodes.failing)
}

/// Redis serves when it answered the check, or when a node of a cluster did
/// not while some of its nodes do not fail fast: the other nodes' requests
/// are served. That holds too in the moments before the node's breaker opens
/// (its first missed budgets, a refused connection) and as a stall ends: one
/// node is never the cluster. The one Redis of a shop not answering or failing
/// fast (its breaker opened by the requests' misses while the check was
/// answered, as it goes away or comes back: every request fails at once, so
/// not `"degraded"`), every node of a cluster failing fast, or an error Redis
/// answered with (an unknown password, a cluster without full coverage) is
/// Redis down.
fn serves(check: RedisCheck, nodes: &NodesFailing) -> bool {
    match check {
        RedisCheck::Answered => nodes.failing.is_empty() || nodes.some_serve(),
        RedisCheck::Unanswered => nodes.some_serve(),
        RedisCheck::Failed => false,
    }
}

async fn healthz(State(state): State<AppState>) -> Response {
    if state.health.draining() {
        return draining();
    }
    let (redis, database) = check(&state).await;
    let (serves, failing) = redis_serves(&state, redis);
    answer(
        serves,
        database,
        json!({ "status": status(serves, redis, &failing, database) }),
    )
}

/// The operators' answer: the public one's status, and which part fails (a
/// draining server's too: 503 `"draining"` with its parts as they are).
async fn healthz_detailed(State(state): State<AppState>) -> Response {
    let (redis, database) = check(&state).await;
    // The Redis nodes failing fast now (one missed a request's budget: its
    // commands fail at once until a probe answers).
    let (serves, failing) = redis_serves(&state, redis);
    let draining = state.health.draining();
    answer(
        serves && !draining,
        database,
        json!({
            "status": match draining {
                true => "draining",
                false => status(serves, redis, &failing, database),
            },
            "redis": redis == RedisCheck::Answered,
            "redis_failing_nodes": failing,
            "database": database.as_str(),
        }),
    )
}

/// The one word the public answer gives: `"down"` while Redis does not serve;
/// at best `"degraded"` while a Redis node fails fast or did not answer the
/// check (the requests that need it go on without it: a guest's page, a 503
/// for a write), else the database's state.
fn status(
    redis_serves: bool,
    check: RedisCheck,
    failing_nodes: &[String],
    database: Database,
) -> &'static str {
    let whole = check == RedisCheck::Answered && failing_nodes.is_empty();
    match database {
        _ if !redis_serves => "down",
        Database::Ok if !whole => Database::Degraded.as_str(),
        database => database.as_str(),
    }
}

/// A draining server's answer: 503 `"draining"`, as one that cannot take
/// orders says, so the balancer takes it out.
fn draining() -> Response {
    answer(false, Database::Ok, json!({ "status": "draining" }))
}

/// 200 while this server can take orders, 503 with `Retry-After` otherwise.
fn answer(redis: bool, database: Database, body: serde_json::Value) -> Response {
    // The state of now: no cache in front may answer a balancer's look with an
    // old one.
    let body = ([(header::CACHE_CONTROL, "no-store")], Json(body));
    if redis && matches!(database, Database::Ok | Database::Degraded) {
        return (StatusCode::OK, body).into_response();
    }
    let mut resp = (StatusCode::SERVICE_UNAVAILABLE, body).into_response();
    resp.headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    // The answer is the report, asked for every second or so by each balancer:
    // not a `request failed` warning each time. Why is logged where it is
    // found (a breaker opening, the write probe refused, an error Redis
    // answered the check with: `check`).
    resp.extensions_mut().insert(crate::error::Cause::new(
        tracing::Level::DEBUG,
        "this server cannot take orders now",
    ));
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nodes(failing: usize, of: usize) -> NodesFailing {
        NodesFailing {
            failing: (0..failing)
                .map(|n| format!("127.0.0.1:{}", 7001 + n))
                .collect(),
            of,
        }
    }

    /// One node of a cluster not answering is never Redis down, whether its
    /// breaker has opened yet or not (the check met it first, or as its stall
    /// ended); the one Redis of a shop, every node of a cluster, or an error
    /// Redis answered with is.
    #[test]
    fn a_node_that_does_not_answer_is_not_the_cluster() {
        use RedisCheck::*;
        for (check, failing, of, expected) in [
            (Answered, 0, 3, true),
            (Answered, 1, 3, true),
            (Unanswered, 1, 3, true),
            // The check met the node before its breaker opened.
            (Unanswered, 0, 3, true),
            (Unanswered, 3, 3, false),
            (Failed, 0, 3, false),
            (Failed, 1, 3, false),
            (Unanswered, 0, 1, false),
            (Unanswered, 1, 1, false),
            (Answered, 0, 1, true),
            // The one Redis, or every node, answered the check while its
            // breaker was open (or the others' opened since).
            (Answered, 1, 1, false),
            (Answered, 3, 3, false),
            (Answered, 0, 0, true),
            // A cluster whose slot map is not known yet.
            (Unanswered, 0, 0, false),
        ] {
            assert_eq!(
                serves(check, &nodes(failing, of)),
                expected,
                "{check:?}, {failing} of {of} failing"
            );
        }
    }

    #[test]
    fn a_node_that_did_not_answer_makes_it_degraded_not_ok() {
        let none: &[String] = &[];
        let one = ["127.0.0.1:7001".to_owned()];
        assert_eq!(status(true, RedisCheck::Answered, none, Database::Ok), "ok");
        assert_eq!(
            status(true, RedisCheck::Unanswered, none, Database::Ok),
            "degraded"
        );
        assert_eq!(
            status(true, RedisCheck::Answered, &one, Database::Ok),
            "degraded"
        );
        assert_eq!(
            status(false, RedisCheck::Unanswered, none, Database::Ok),
            "down"
        );
        assert_eq!(
            status(true, RedisCheck::Unanswered, none, Database::ReadOnly),
            "read_only"
        );
    }
}
