//! The one HTTP error type: every failure below the web tier is mapped to a status
//! and a short message here. Internal details are logged once, never sent.

use askama::Template;
use axum::Json;
use axum::extract::Request;
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::{Html, IntoResponse, Response};
use serde::Serialize;
use shop_app::AppError;
use shop_cache::CacheError;
use shop_cache::domain::InvalidInput;
use shop_db::DbError;

use crate::request::{BadRequest, wants_json};
use crate::views::ErrorPage;

/// An error answer. The message is for the user and must not contain internals.
#[derive(Debug)]
pub struct WebError {
    status: StatusCode,
    code: &'static str,
    message: String,
    /// Seconds for a `Retry-After` header (429 and 503 answers).
    retry_after: Option<u64>,
}

impl WebError {
    /// Any status with a machine code and a human message.
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        Self {
            status,
            code,
            message: message.into(),
            retry_after: None,
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

    /// 429: too many attempts; the answer says when to try again (`Retry-After`).
    pub fn too_many_requests(message: impl Into<String>, retry_after: std::time::Duration) -> Self {
        let mut e = Self::new(StatusCode::TOO_MANY_REQUESTS, "too_many_requests", message);
        e.retry_after = Some(retry_after.as_secs().max(1));
        e
    }

    /// 401: this needs a logged-in user.
    pub fn unauthorized() -> Self {
        Self::new(StatusCode::UNAUTHORIZED, "login_required", "log in first")
    }

    /// 503: a store is down; try again.
    fn unavailable() -> Self {
        let mut e = Self::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "unavailable",
            "the shop is busy or partly down; try again shortly",
        );
        e.retry_after = Some(1);
        e
    }

    /// 503: the answer to this idempotency key is not known yet (an earlier
    /// request with it is still being answered, or its outcome waits to be
    /// settled); retry with the same key shortly to get it.
    pub fn in_progress() -> Self {
        let mut e = Self::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "in_progress",
            "an earlier request with this key is still being processed; try again shortly",
        );
        e.retry_after = Some(1);
        e
    }

    /// 500: a bug or an unexpected state; details are in the log, not the answer.
    pub fn internal() -> Self {
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

/// Left on an error response so [`as_html_for_pages`] can render it as a page.
#[derive(Debug, Clone)]
struct ErrorMessage(String);

impl IntoResponse for WebError {
    fn into_response(self) -> Response {
        let body = Json(Body {
            error: self.code,
            message: &self.message,
        });
        let mut resp = (self.status, body).into_response();
        if let Some(secs) = self.retry_after {
            resp.headers_mut()
                .insert(http::header::RETRY_AFTER, http::HeaderValue::from(secs));
        }
        resp.extensions_mut().insert(ErrorMessage(self.message));
        resp
    }
}

/// Middleware: errors are JSON for `/api` and for clients asking for JSON, and a
/// short HTML page for everyone else (people using the pages).
pub async fn as_html_for_pages(req: Request, next: Next) -> Response {
    let page_request = !req.uri().path().starts_with("/api/") && !wants_json(req.headers());
    let resp = next.run(req).await;
    if !page_request {
        return resp;
    }
    let Some(ErrorMessage(message)) = resp.extensions().get::<ErrorMessage>().cloned() else {
        return resp;
    };
    let status = resp.status();
    let page = ErrorPage {
        status: status.as_u16(),
        message: &message,
    };
    match page.render() {
        Ok(html) => {
            let mut page = (status, Html(html)).into_response();
            // A 503's (or 429's) `Retry-After` holds for the page as for the JSON.
            if let Some(retry) = resp.headers().get(http::header::RETRY_AFTER) {
                page.headers_mut()
                    .insert(http::header::RETRY_AFTER, retry.clone());
            }
            page
        }
        Err(_) => resp,
    }
}

impl From<BadRequest> for WebError {
    fn from(BadRequest(message): BadRequest) -> Self {
        Self::bad_request(message)
    }
}

/// A template that failed to render: a bug, logged, and a 500.
impl From<askama::Error> for WebError {
    fn from(error: askama::Error) -> Self {
        tracing::error!(%error, "template failed");
        Self::internal()
    }
}

impl From<CacheError> for WebError {
    fn from(error: CacheError) -> Self {
        match error {
            CacheError::Invalid(invalid @ InvalidInput::CartFull { .. }) => {
                WebError::new(StatusCode::CONFLICT, "cart_full", invalid.to_string())
            }
            CacheError::Invalid(invalid) => WebError::bad_request(invalid.to_string()),
            CacheError::Redis(ref e) => {
                if error.is_failing_fast() {
                    tracing::debug!(error = %e, "redis unavailable");
                } else {
                    tracing::warn!(error = %e, "redis unavailable");
                }
                WebError::unavailable()
            }
            CacheError::Corrupt { what } => {
                tracing::error!(what, "corrupt value in redis");
                WebError::internal()
            }
            CacheError::Source { what, source } => {
                tracing::warn!(what, error = %source, "unavailable");
                WebError::unavailable()
            }
        }
    }
}

impl From<AppError> for WebError {
    fn from(error: AppError) -> Self {
        match error {
            AppError::Cache(error) => error.into(),
            AppError::Db(error) => error.into(),
            AppError::Pending => WebError::in_progress(),
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
