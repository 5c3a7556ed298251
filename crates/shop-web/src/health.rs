//! `GET /healthz`: whether this server can do its whole job, for load balancers,
//! orchestrators and people.
//!
//! The answer is `{"redis": true|false, "database": "ok"|"degraded"|"down"}`:
//! - `"ok"`: the database answers reads (`SELECT 1` on the read pool) and a write
//!   could start now ([`shop_db::Db::probe_write`]: on SQLite, `BEGIN IMMEDIATE;
//!   ROLLBACK` on the write connection with a 100 ms busy wait, after waiting at
//!   most 300 ms for that connection, so a write queue that long counts as degraded);
//! - `"degraded"`: reads work but writes cannot start, e.g. another process holds
//!   SQLite's write lock or every write connection is stuck. Pages and logins still
//!   work; checkouts and flash purchases answer 503;
//! - `"down"`: reads fail too.
//!
//! The status is 200 while Redis is up and the database answers reads (`"ok"` or
//! `"degraded"`), and 503 (with `Retry-After`) when Redis or the database is down.
//! Degraded is 200 on purpose: every web server shares the one database, so a
//! write lock degrades them all at once, and a load balancer that took them all out
//! would drop the pages, the cart and the row cache that still work. The body says
//! `"degraded"` for monitoring, and the warning is logged.
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
    /// Reads work, writes cannot start.
    Degraded,
    /// Reads fail.
    Down,
}

impl Database {
    fn as_str(self) -> &'static str {
        match self {
            Database::Ok => "ok",
            Database::Degraded => "degraded",
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

/// The last health answer and when it was computed; the lock makes one request at
/// a time compute it.
#[derive(Debug, Default)]
pub struct HealthCache(tokio::sync::Mutex<Option<(Instant, bool, Database)>>);

async fn check(state: &AppState) -> (bool, Database) {
    let mut last = state.health.0.lock().await;
    if let Some((at, redis, database)) = *last
        && at.elapsed() < FRESH_FOR
    {
        return (redis, database);
    }
    let (redis, reads, writes) = tokio::join!(
        passes(state.sessions.count()),
        passes(state.db.ping()),
        passes(state.db.probe_write()),
    );
    let database = match (reads, writes) {
        (true, true) => Database::Ok,
        (true, false) => Database::Degraded,
        (false, _) => Database::Down,
    };
    if !writes {
        tracing::warn!(reads, "health check: the database cannot start a write");
    }
    *last = Some((Instant::now(), redis, database));
    (redis, database)
}

async fn healthz(State(state): State<AppState>) -> Response {
    let (redis, database) = check(&state).await;
    let body = Json(json!({ "redis": redis, "database": database.as_str() }));
    if redis && database != Database::Down {
        return (StatusCode::OK, body).into_response();
    }
    let mut resp = (StatusCode::SERVICE_UNAVAILABLE, body).into_response();
    resp.headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    resp
}
