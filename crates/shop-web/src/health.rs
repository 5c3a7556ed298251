//! `GET /healthz`: 200 when Redis and the database answer, 503 otherwise.

use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;
use axum::{Json, Router};
use serde_json::json;

use crate::AppState;

/// The health route.
pub fn router(state: AppState) -> Router {
    Router::new()
        .route("/healthz", get(healthz))
        .with_state(state)
}

async fn healthz(State(state): State<AppState>) -> (StatusCode, Json<serde_json::Value>) {
    let redis = state.sessions.count().await.is_ok();
    let db = state.db.ping().await.is_ok();
    let status = if redis && db {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (status, Json(json!({ "redis": redis, "database": db })))
}
