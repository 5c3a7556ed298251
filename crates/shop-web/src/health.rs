//! `GET /healthz`: whether this server can do its whole job, for load balancers,
//! orchestrators and people.
//!
//! The answer is `{"redis": true|false, "database": "ok"|"degraded"|"read_only"|"down"}`:
//! - `"ok"`: the database answers reads (`SELECT 1` on the read pool) and a write
//!   commits now ([`shop_db::Db::probe_write`]: a one-row update on the write
//!   connection, on SQLite with a 100 ms busy wait, after waiting at most 300 ms
//!   for that connection, so a write queue that long counts as failing);
//! - `"degraded"`: reads work but writes have failed for less than the write grace
//!   ([`WebConfig::write_grace`](crate::WebConfig::write_grace), 10 s by default):
//!   a lock held elsewhere for a moment, a write queue. Pages and logins still
//!   work; checkouts and flash purchases answer 503;
//! - `"read_only"`: writes have failed for longer than the grace (a full disk, a
//!   read-only file system, a lost primary): this server cannot take orders;
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

use std::time::Duration;
use std::time::Instant;

use axum::extract::State;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use serde_json::json;

use crate::AppState;

/// How long writes may fail before `/healthz` answers 503 (`"read_only"`).
pub const DEFAULT_WRITE_GRACE: Duration = Duration::from_secs(10);

/// The longest any one probe may take before it counts as failed.
const PROBE_TIMEOUT: Duration = Duration::from_secs(1);

/// The health route.
pub fn router(state: AppState) -> Router {
    Router::new()
        .route("/healthz", get(healthz))
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

/// How long a computed health answer is reused.
const FRESH_FOR: Duration = Duration::from_secs(1);

/// The last health answer and when it was computed, and since when writes have
/// been failing; the lock makes one request at a time compute it.
#[derive(Debug, Default)]
pub struct HealthCache(tokio::sync::Mutex<HealthState>);

#[derive(Debug, Default)]
struct HealthState {
    last: Option<(Instant, bool, Database)>,
    writes_failing_since: Option<Instant>,
}

async fn check(state: &AppState) -> (bool, Database) {
    let mut health = state.health.0.lock().await;
    if let Some((at, redis, database)) = health.last
        && at.elapsed() < FRESH_FOR
    {
        return (redis, database);
    }
    let (redis, reads, writes) = tokio::join!(
        passes(state.sessions.count()),
        passes(state.db.ping()),
        passes(state.db.probe_write()),
    );
    let now = Instant::now();
    let failing_since = if writes {
        None
    } else {
        Some(*health.writes_failing_since.get_or_insert(now))
    };
    if health.writes_failing_since.is_some() && writes {
        tracing::info!("health check: the database commits writes again");
    }
    health.writes_failing_since = failing_since;
    let database = match (reads, failing_since) {
        (false, _) => Database::Down,
        (true, None) => Database::Ok,
        (true, Some(since)) if now - since < state.config.write_grace => Database::Degraded,
        (true, Some(_)) => Database::ReadOnly,
    };
    if let Some(since) = failing_since {
        tracing::warn!(
            reads,
            failing_for_ms = (now - since).as_millis() as u64,
            "health check: the database cannot commit a write"
        );
    }
    health.last = Some((now, redis, database));
    (redis, database)
}

async fn healthz(State(state): State<AppState>) -> Response {
    let (redis, database) = check(&state).await;
    let body = Json(json!({ "redis": redis, "database": database.as_str() }));
    if redis && matches!(database, Database::Ok | Database::Degraded) {
        return (StatusCode::OK, body).into_response();
    }
    let mut resp = (StatusCode::SERVICE_UNAVAILABLE, body).into_response();
    resp.headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    resp
}
