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
//! The status is 200 only when Redis is up and the database is `"ok"`, and 503 (with
//! `Retry-After`) otherwise, degraded included: a server that cannot take orders
//! should be taken out of rotation in favour of one that can, and a degraded
//! database is exactly what an operator must be told about. Where every server
//! shares the degraded database, the body says that reads still work.
//!
//! Every probe runs at once and is bounded in time, so the check answers within
//! about a second even when a store hangs.

use std::time::Duration;

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
enum Database {
    Ok,
    Degraded,
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

async fn healthz(State(state): State<AppState>) -> Response {
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
    let body = Json(json!({ "redis": redis, "database": database.as_str() }));
    if redis && database == Database::Ok {
        return (StatusCode::OK, body).into_response();
    }
    if !writes {
        tracing::warn!(reads, "health check: the database cannot start a write");
    }
    let mut resp = (StatusCode::SERVICE_UNAVAILABLE, body).into_response();
    resp.headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    resp
}
