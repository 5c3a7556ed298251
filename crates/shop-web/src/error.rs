//! The one HTTP error type: every failure below the web tier is mapped to a status
//! and a short message here. Internal details travel with the answer as its
//! [`Cause`] and are logged once, by the request log ([`crate::request_log`],
//! with the request's method and path), never sent.

use askama::Template;
use axum::Json;
use axum::extract::Request;
use axum::http::StatusCode;
use axum::response::{Html, IntoResponse, Response};
use serde::Serialize;
use shop_app::AppError;
use shop_app::catalogue::CatalogueError;
use shop_cache::CacheError;
use shop_cache::domain::InvalidInput;
use shop_db::DbError;

use crate::answered::{Finish, Finished, Start};
use crate::request::{BadRequest, wants_json};
use crate::templates::ErrorPage;

/// An error answer. The message is for the user and must not contain internals.
#[derive(Debug)]
pub struct WebError {
    status: StatusCode,
    code: &'static str,
    message: String,
    /// Seconds for a `Retry-After` header (429 and 503 answers).
    retry_after: Option<u64>,
    /// What went wrong below, for the log.
    cause: Option<Cause>,
}

/// What went wrong below the web tier, for the log only: left on the error's
/// response and logged once by the request log ([`crate::request_log`]).
#[derive(Debug, Clone)]
pub struct Cause {
    level: tracing::Level,
    message: String,
}

impl Cause {
    /// `message` at `level`.
    pub fn new(level: tracing::Level, message: impl Into<String>) -> Self {
        Self {
            level,
            message: message.into(),
        }
    }

    /// A failure of Redis: logged quietly (debug) while the connection's breaker
    /// fails commands at once (the outage was logged when it began), else as a
    /// warning.
    pub fn redis(error: &CacheError, message: &str) -> Self {
        let level = if error.is_failing_fast() {
            tracing::Level::DEBUG
        } else {
            tracing::Level::WARN
        };
        Self::new(level, format!("{message}: {error}"))
    }

    /// Logs it, where no answer carries it (a failure the caller goes on
    /// without).
    pub fn log(&self) {
        let message = &self.message;
        match self.level {
            tracing::Level::ERROR => tracing::error!("{message}"),
            tracing::Level::WARN => tracing::warn!("{message}"),
            tracing::Level::INFO => tracing::info!("{message}"),
            _ => tracing::debug!("{message}"),
        }
    }

    /// Logs it as the cause of the answer to a request: its method, path (never
    /// its query), status and latency with it.
    pub fn log_answer(&self, method: &http::Method, path: &str, status: u16, latency_us: u64) {
        let message = &self.message;
        match self.level {
            tracing::Level::ERROR => {
                tracing::error!(%method, %path, status, latency_us, "{message}")
            }
            tracing::Level::WARN => {
                tracing::warn!(%method, %path, status, latency_us, "{message}")
            }
            tracing::Level::INFO => {
                tracing::info!(%method, %path, status, latency_us, "{message}")
            }
            _ => tracing::debug!(%method, %path, status, latency_us, "{message}"),
        }
    }
}

impl WebError {
    /// Logs this error where the caller goes on without what failed instead of
    /// answering with it: `message`, and what went wrong below (at its level).
    pub fn log_cause(&self, message: &str) {
        match &self.cause {
            Some(cause) => Cause::new(cause.level, format!("{message}: {}", cause.message)).log(),
            None => tracing::warn!("{message}: {}", self.message),
        }
    }

    /// Any status with a machine code and a human message.
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        Self {
            status,
            code,
            message: message.into(),
            retry_after: None,
            cause: None,
        }
    }

    /// This error, with what went wrong below it for the log.
    pub fn caused_by(mut self, cause: Cause) -> Self {
        self.cause = Some(cause);
        self
    }

    /// 400: the request was malformed.
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "bad_request", message)
    }

    /// 404.
    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, "not_found", message)
    }

    /// 410: the item is no longer sold (its page and its insights).
    pub fn retired() -> Self {
        Self::new(StatusCode::GONE, "retired", "this item is no longer sold")
    }

    /// 429: too many attempts; the answer says when to try again (`Retry-After`).
    pub fn too_many_requests(message: impl Into<String>, retry_after: std::time::Duration) -> Self {
        Self::too_many("too_many_requests", message, retry_after)
    }

    /// 429 with `Retry-After`, `code` saying which of the client's bounds it
    /// reached (its address holds too many of something).
    pub fn too_many(
        code: &'static str,
        message: impl Into<String>,
        retry_after: std::time::Duration,
    ) -> Self {
        let mut e = Self::new(StatusCode::TOO_MANY_REQUESTS, code, message);
        e.retry_after = Some(seconds_up(retry_after));
        e
    }

    /// 503 with `Retry-After`: a bounded resource of this server (its event
    /// streams) is full; `code` says which bound.
    pub fn busy(
        code: &'static str,
        message: impl Into<String>,
        retry_after: std::time::Duration,
    ) -> Self {
        let mut e = Self::new(StatusCode::SERVICE_UNAVAILABLE, code, message);
        e.retry_after = Some(seconds_up(retry_after));
        e
    }

    /// 401: this needs a logged-in user.
    pub fn unauthorized() -> Self {
        Self::new(StatusCode::UNAUTHORIZED, "login_required", "log in first")
    }

    /// 503: a store is down; try again.
    pub(crate) fn unavailable() -> Self {
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

/// Left on an error response so [`ErrorPagesLayer`] can render it as a page.
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
        if let Some(cause) = self.cause {
            resp.extensions_mut().insert(cause);
        }
        resp
    }
}

/// A client error answered below the shop's handlers, by axum or tower (a path
/// or query that does not parse, a body of another type: 415, a method the
/// route does not take: 405), in the shop's shape, `{error, message}` with
/// axum's own text as the message, so a JSON client reads every 4xx the same
/// way and a person gets the error page; an answer of the shop's own
/// ([`WebError`]), or one with a type of its own, is left as it is. What it
/// said besides its body is kept ([`in_place_of`]).
pub(crate) fn rejection_in_shop_shape(resp: Response) -> Response {
    use http_body::Body as _;

    let status = resp.status();
    let plain = resp
        .headers()
        .get(http::header::CONTENT_TYPE)
        .is_none_or(|v| v.as_bytes().starts_with(b"text/plain"));
    if !status.is_client_error() || !plain || resp.extensions().get::<ErrorMessage>().is_some() {
        return resp;
    }
    let (parts, mut body) = resp.into_parts();
    // axum's rejections are whole in memory: their one frame is there at the
    // first poll. Anything else is left as it came.
    let mut first = std::task::Context::from_waker(std::task::Waker::noop());
    let text = match std::pin::Pin::new(&mut body).poll_frame(&mut first) {
        std::task::Poll::Ready(Some(Ok(frame))) => frame.into_data().ok(),
        std::task::Poll::Ready(None) => Some(axum::body::Bytes::new()),
        std::task::Poll::Ready(Some(Err(_))) => None,
        std::task::Poll::Pending => return Response::from_parts(parts, body),
    };
    let text = text
        .and_then(|bytes| String::from_utf8(bytes.to_vec()).ok())
        .filter(|text| !text.trim().is_empty() && text.len() <= 1_000);
    let (code, fallback) = match status {
        StatusCode::NOT_FOUND => ("not_found", "there is no such page"),
        StatusCode::METHOD_NOT_ALLOWED => ("method_not_allowed", "this method is not allowed here"),
        StatusCode::UNSUPPORTED_MEDIA_TYPE => (
            "unsupported_media_type",
            "the request's body is not of a type this accepts",
        ),
        StatusCode::UNPROCESSABLE_ENTITY => {
            ("unprocessable", "the request's body could not be used")
        }
        _ => ("bad_request", "the request could not be read"),
    };
    let shaped = WebError::new(status, code, text.unwrap_or_else(|| fallback.to_owned()));
    in_place_of(
        Response::from_parts(parts, axum::body::Body::empty()),
        shaped,
    )
}

/// `error`'s answer in place of `old` (an answer of a layer below the shop's
/// error shaping), keeping what `old` said besides its body ([`keeping`]).
pub(crate) fn in_place_of(old: Response, error: WebError) -> Response {
    keeping(old.into_parts().0, error.into_response())
}

/// `new`, an answer made in place of one of `old`'s (`old`'s parts), with
/// what `old` said besides its body: its headers (a 405's `Allow`, a 503's
/// `Retry-After`, the session's `Set-Cookie`, `Connection: close`) but those
/// of its body, which `new`'s replace, and its extensions (the metrics'
/// mark that a route counted it, a [`Cause`] to log) under `new`'s.
fn keeping(old: http::response::Parts, new: Response) -> Response {
    let (mut parts, body) = new.into_parts();
    let mut headers = old.headers;
    headers.remove(http::header::CONTENT_TYPE);
    headers.remove(http::header::CONTENT_LENGTH);
    for name in parts.headers.keys() {
        headers.remove(name);
    }
    for (name, value) in &parts.headers {
        headers.append(name.clone(), value.clone());
    }
    parts.headers = headers;
    let mut extensions = old.extensions;
    extensions.extend(std::mem::take(&mut parts.extensions));
    parts.extensions = extensions;
    Response::from_parts(parts, body)
}

/// A refusal from request parsing answers as the 400 it is.
impl IntoResponse for BadRequest {
    fn into_response(self) -> Response {
        WebError::from(self).into_response()
    }
}

/// Whether an error answer to `req` is a page (not JSON).
fn is_page_request(req: &Request) -> bool {
    !req.uri().path().starts_with("/api/") && !wants_json(req.headers())
}

/// What [`ErrorPagesLayer`] does to an answer to a request that `page_request`
/// says is a page's: an error as a page, and any error answer marked
/// [`ERROR_CACHE_CONTROL`] unless it says otherwise.
fn finish(resp: Response, page_request: PageRequest) -> Response {
    let mut resp = as_page(resp, page_request);
    let status = resp.status();
    if (status.is_client_error() || status.is_server_error())
        && !resp.headers().contains_key(http::header::CACHE_CONTROL)
    {
        resp.headers_mut().insert(
            http::header::CACHE_CONTROL,
            http::HeaderValue::from_static(ERROR_CACHE_CONTROL),
        );
    }
    resp
}

/// What an error answer says of caching when it says nothing itself: kept by
/// no cache. An error is of its moment (a 404 for an item added a minute
/// later, a 503 while a store was down); a CDN that kept it by its own
/// heuristics (some keep a 404 for minutes) would keep answering it after the
/// shop no longer does. The answers of the visitors' routes already say
/// `private, no-store` (the session layer); this covers the pages the same
/// for everyone (an item page's 404 or 410), the assets and the answers of
/// [`crate::http_limits::harden`]'s own layers.
pub const ERROR_CACHE_CONTROL: &str = "no-store";

/// An error answer to a page's request (`page_request`) rendered as a page.
fn as_page(resp: Response, page_request: PageRequest) -> Response {
    if !page_request.page {
        return resp;
    }
    let Some(ErrorMessage(message)) = resp.extensions().get::<ErrorMessage>().cloned() else {
        return resp;
    };
    let status = resp.status();
    let page = ErrorPage {
        status: status.as_u16(),
        message: &message,
        about_cart: page_request.about_cart,
    };
    let html = page.render();
    let (parts, body) = resp.into_parts();
    match html {
        // What the answer said besides its body holds for the page as for
        // the JSON: a 503's `Retry-After`, a 405's `Allow`, a cookie.
        Ok(html) => keeping(parts, (status, Html(html)).into_response()),
        Err(_) => Response::from_parts(parts, body),
    }
}

/// The layer that finishes every error answer (the shop's, in
/// [`crate::http_limits::harden`], outside the request log, which logs the
/// [`Cause`] it carries): answers JSON for `/api` and for clients asking for
/// JSON, a short HTML page for everyone else (people using the pages).
#[derive(Debug, Clone, Copy)]
pub struct ErrorPagesLayer;

impl Start for ErrorPagesLayer {
    type Finish = PageRequest;

    fn start(&self, req: &mut Request) -> PageRequest {
        PageRequest {
            page: is_page_request(req),
            about_cart: matches!(req.uri().path(), "/cart" | "/checkout"),
        }
    }
}

impl<S> tower::Layer<S> for ErrorPagesLayer {
    type Service = Finished<S, Self>;

    fn layer(&self, inner: S) -> Self::Service {
        Finished::new(inner, *self)
    }
}

/// Whether a request answered through [`ErrorPagesLayer`] is a page's, and
/// one of the cart's.
#[derive(Debug, Clone, Copy)]
pub struct PageRequest {
    page: bool,
    about_cart: bool,
}

impl Finish for PageRequest {
    fn finish(self, resp: Response) -> Response {
        finish(resp, self)
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
        Self::internal().caused_by(Cause::new(
            tracing::Level::ERROR,
            format!("template failed: {error}"),
        ))
    }
}

impl From<CacheError> for WebError {
    fn from(error: CacheError) -> Self {
        match error {
            CacheError::Invalid(invalid @ InvalidInput::CartFull { .. }) => {
                WebError::new(StatusCode::CONFLICT, "cart_full", invalid.to_string())
            }
            CacheError::Invalid(invalid @ InvalidInput::LineFull { .. }) => {
                WebError::new(StatusCode::CONFLICT, "line_full", invalid.to_string())
            }
            CacheError::Invalid(invalid) => WebError::bad_request(invalid.to_string()),
            CacheError::Redis(_) | CacheError::FailingFast(_) => {
                WebError::unavailable().caused_by(Cause::redis(&error, "redis unavailable"))
            }
            CacheError::Corrupt { what } => WebError::internal().caused_by(Cause::new(
                tracing::Level::ERROR,
                format!("corrupt value in redis: {what}"),
            )),
            CacheError::Source { what, source } => WebError::unavailable().caused_by(Cause::new(
                tracing::Level::WARN,
                format!("{what} unavailable: {source}"),
            )),
        }
    }
}

impl From<AppError> for WebError {
    fn from(error: AppError) -> Self {
        match error {
            AppError::Cache(error) => error.into(),
            AppError::Db(error) => error.into(),
            AppError::Pending => WebError::in_progress(),
            AppError::NotRecorded { settled_within } => {
                let seconds = settled_within.as_secs().max(1);
                let mut e = WebError::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "not_recorded",
                    format!(
                        "your order could not be written just now (the shop is busy or partly \
                         down); ask again with the same key in {seconds} seconds to learn \
                         whether you bought it"
                    ),
                );
                e.retry_after = Some(seconds);
                e
            }
            AppError::CartBusy => {
                let mut e = WebError::new(
                    StatusCode::CONFLICT,
                    "checkout_in_progress",
                    "another checkout of this cart is in progress; look at your cart again in a moment",
                );
                e.retry_after = Some(1);
                e
            }
        }
    }
}

impl From<CatalogueError> for WebError {
    fn from(error: CatalogueError) -> Self {
        match error {
            CatalogueError::UnknownItem(_) => WebError::not_found("there is no such item"),
            CatalogueError::IdTaken(id) => WebError::new(
                StatusCode::CONFLICT,
                "id_taken",
                format!("item {id} already exists"),
            ),
            CatalogueError::NoIdLeft => {
                WebError::new(StatusCode::CONFLICT, "no_id_left", error.to_string())
            }
            CatalogueError::Stale { ref current } => WebError::new(
                StatusCode::CONFLICT,
                "stale",
                format!(
                    "item {} changed since (it is at version {}): nothing was saved; reload it",
                    current.id, current.version
                ),
            ),
            CatalogueError::NotSold(_) => {
                WebError::new(StatusCode::CONFLICT, "item_retired", error.to_string())
            }
            CatalogueError::OnSale { .. } => {
                WebError::new(StatusCode::CONFLICT, "on_sale", error.to_string())
            }
            CatalogueError::BelowSale { .. } => {
                WebError::new(StatusCode::CONFLICT, "below_sale_price", error.to_string())
            }
            CatalogueError::StockOutOfRange { .. } => WebError::new(
                StatusCode::CONFLICT,
                "stock_out_of_range",
                error.to_string(),
            ),
            // Saved, not yet purged: say so, and that trying again finishes it.
            CatalogueError::NotPurged { ref source, .. } => WebError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "not_purged",
                "saved, but the cached pages could not be purged yet; send it again",
            )
            .caused_by(Cause::redis(
                source,
                "purge after a catalogue change failed",
            )),
            CatalogueError::Failed(error) => error.into(),
        }
    }
}

impl From<DbError> for WebError {
    fn from(error: DbError) -> Self {
        if error.is_unavailable() {
            // Failed at once, the database known to be away: said once, by the
            // gate that failed it, not at every request.
            let level = if error.failed_fast() {
                tracing::Level::DEBUG
            } else {
                tracing::Level::WARN
            };
            WebError::unavailable()
                .caused_by(Cause::new(level, format!("database unavailable: {error}")))
        } else {
            WebError::internal().caused_by(Cause::new(
                tracing::Level::ERROR,
                format!("database error: {error}"),
            ))
        }
    }
}

/// A `Retry-After` in whole seconds, rounded up (a client that waits what it is
/// told is not early), at least 1.
fn seconds_up(wait: std::time::Duration) -> u64 {
    (wait.as_millis().div_ceil(1000) as u64).max(1)
}
