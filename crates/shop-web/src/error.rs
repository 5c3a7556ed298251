//! The one HTTP error type: every failure below the web tier is mapped to a status
//! and a short message here. Internal details are logged once, never sent.

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use shop_cache::CacheError;
use shop_db::DbError;

/// An error answer. The message is for the user and must not contain internals.
#[derive(Debug)]
pub struct WebError {
    status: StatusCode,
    code: &'static str,
    message: String,
}

impl WebError {
    /// Any status with a machine code and a human message.
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        Self {
            status,
            code,
            message: message.into(),
        }
    }

    /// 400: the request was malformed.
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "bad_request", message)
    }

    /// 404.
    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, "not_found", message)
    }

    /// 401: this needs a logged-in user.
    pub fn unauthorized() -> Self {
        Self::new(StatusCode::UNAUTHORIZED, "login_required", "log in first")
    }

    /// 503: a store is down; try again.
    fn unavailable() -> Self {
        Self::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "unavailable",
            "the shop is busy or partly down; try again shortly",
        )
    }

    fn internal() -> Self {
        Self::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            "something went wrong on our side",
        )
    }

    /// The status it answers with.
    pub fn status(&self) -> StatusCode {
        self.status
    }
}

#[derive(Serialize)]
struct Body<'a> {
    error: &'a str,
    message: &'a str,
}

impl IntoResponse for WebError {
    fn into_response(self) -> Response {
        let body = Json(Body {
            error: self.code,
            message: &self.message,
        });
        (self.status, body).into_response()
    }
}

impl From<CacheError> for WebError {
    fn from(error: CacheError) -> Self {
        match error {
            CacheError::Invalid(invalid) => WebError::bad_request(invalid.to_string()),
            CacheError::Redis(ref e) => {
                tracing::warn!(error = %e, "redis unavailable");
                WebError::unavailable()
            }
            CacheError::Corrupt { what } => {
                tracing::error!(what, "corrupt value in redis");
                WebError::internal()
            }
        }
    }
}

impl From<DbError> for WebError {
    fn from(error: DbError) -> Self {
        if error.is_unavailable() {
            tracing::warn!(%error, "database unavailable");
            WebError::unavailable()
        } else {
            tracing::error!(%error, "database error");
            WebError::internal()
        }
    }
}
