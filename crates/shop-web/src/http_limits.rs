//! The outermost layers of the HTTP stack: what bounds one request's cost and
//! keeps a bug in one handler from taking the connection (or a secret) with it.
//!
//! [`harden`] wraps a router, outermost first, in:
//! - the security headers of every answer ([`SecurityHeaders`]): pages, errors,
//!   cached pages (added as they leave, never stored with a page), static files;
//! - error answers as pages for people ([`error::ErrorPagesLayer`]);
//! - the request log ([`crate::request_log`]): method, path (no query string),
//!   status and latency, and nothing else: never headers, so never the session
//!   cookie; an error answer's cause logged once;
//! - the answers of the layers below in the shop's error shape ([`InShopShape`]),
//!   which would otherwise be empty or plain text;
//! - panic catching: a panicking handler answers the generic 500, never the panic
//!   text, and the connection lives on;
//! - a request timeout ([`TIMEOUT_STATUS`] after [`HttpLimits::request_timeout`],
//!   counting the time spent reading the body, so a trickling upload is bounded
//!   too: that one answers 408, the client's doing, not logged as a failure
//!   and logged at most once a minute ([`BodyWatch`]);
//! - a request body limit (413 beyond [`HttpLimits::body_limit`]), checked against
//!   `Content-Length` before any handler, session lookup or Redis call runs.

use std::any::Any;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use shop_cache::repeating::Repeating;
use tower_http::catch_panic::CatchPanicLayer;
use tower_http::limit::RequestBodyLimitLayer;
use tower_http::timeout::TimeoutLayer;

use crate::answered::{Finish, FinishLayer, Finished, Start};
use crate::error::{self, WebError};
use crate::metrics::{Metrics, UncountedLayer};
use crate::request_log::RequestLogLayer;

/// How long one request may take, body reading included. The shop's slowest
/// honest request (a checkout: a database transaction and a few Redis calls)
/// takes milliseconds; ten seconds is far past anything but a stuck store or a
/// client trickling its body, and short enough that such requests do not pile up.
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// The largest request body accepted. The shop's forms (cart line, login,
/// checkout key) are tens of bytes; 64 KiB leaves room for anything reasonable
/// while a client cannot make the server buffer megabytes per request.
pub const DEFAULT_BODY_LIMIT: usize = 64 * 1024;

/// What a request that ran out of time answers: 503, as the shop answers when a
/// store is slow or down, so a client retries it the same way.
pub const TIMEOUT_STATUS: StatusCode = StatusCode::SERVICE_UNAVAILABLE;

/// The bounds [`harden`] enforces. They are constants rather than settings: no
/// deployment has needed other values, and [`crate::WebConfig`] stays small.
#[derive(Debug, Clone)]
pub struct HttpLimits {
    /// How long one request may take before it answers [`TIMEOUT_STATUS`].
    pub request_timeout: Duration,
    /// The largest request body accepted, in bytes.
    pub body_limit: usize,
}

impl Default for HttpLimits {
    fn default() -> Self {
        Self {
            request_timeout: DEFAULT_REQUEST_TIMEOUT,
            body_limit: DEFAULT_BODY_LIMIT,
        }
    }
}

/// Wraps `router` in the layers listed in the module doc; apply it last, so they
/// are outermost and cover every route, fallback and inner layer.
///
/// They wrap the router as one service (a router of that one service is what
/// comes back), not each of its routes: `Router::layer` boxes every route
/// again per layer, and a request clones (and drops) every box on its way
/// down (about a tenth of a cached page's CPU for seven such layers). The
/// shop's own layers box nothing and clone no service per request (as axum's
/// `map_response` would: [`crate::answered`]).
pub fn harden(router: Router, limits: &HttpLimits) -> Router {
    harden_with(router, limits, None)
}

/// [`harden`], every answer no route counted in `metrics` (the limits' own,
/// a path no route serves) counted there too ([`UncountedLayer`]).
pub fn harden_counted(router: Router, limits: &HttpLimits, metrics: Arc<Metrics>) -> Router {
    harden_with(router, limits, Some(UncountedLayer(metrics)))
}

fn harden_with(router: Router, limits: &HttpLimits, count: Option<UncountedLayer>) -> Router {
    let hardened = tower::ServiceBuilder::new()
        .layer(FinishLayer(SecurityHeaders))
        .layer(error::ErrorPagesLayer)
        .layer(RequestLogLayer)
        .layer(FinishLayer(InShopShape))
        // Inside the shaping, which makes new answers of axum's refusals: the
        // routes' mark that they counted an answer is still on it here.
        .option_layer(count)
        .map_response(any_body)
        .layer(CatchPanicLayer::custom(answer_panic))
        .layer(BodyWatch::default())
        .layer(TimeoutLayer::with_status_code(
            TIMEOUT_STATUS,
            limits.request_timeout,
        ))
        .map_response(any_body)
        .layer(RequestBodyLimitLayer::new(limits.body_limit))
        .service(router);
    Router::new().fallback_service(hardened)
}

/// `resp` with axum's body type (what the layer above needs).
fn any_body<B>(resp: Response<B>) -> Response
where
    B: http_body::Body<Data = axum::body::Bytes> + Send + 'static,
    B::Error: Into<axum::BoxError>,
{
    resp.map(axum::body::Body::new)
}

/// The pages load only their own scripts, styles and data (no inline script or
/// style anywhere), may not be framed (a page of another site framing the shop
/// could click "checkout" or "log out" for its visitor), and post forms only to
/// the shop.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'self'; frame-ancestors 'none'; \
     object-src 'none'; base-uri 'none'; form-action 'self'";

/// Adds the security headers every answer carries (see [`CONTENT_SECURITY_POLICY`]):
/// no content-type sniffing, no framing (also for browsers that predate
/// `frame-ancestors`), and no `Referer` to other sites (a URL's query may hold a
/// search or a `next` path). Headers the answer already has are kept.
#[derive(Debug, Clone, Copy)]
pub struct SecurityHeaders;

impl Finish for SecurityHeaders {
    fn finish(self, mut resp: Response) -> Response {
        add_security_headers(&mut resp);
        resp
    }
}

fn add_security_headers(resp: &mut Response) {
    let headers = resp.headers_mut();
    for (name, value) in [
        (header::CONTENT_SECURITY_POLICY, CONTENT_SECURITY_POLICY),
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        (header::X_FRAME_OPTIONS, "DENY"),
        (header::REFERRER_POLICY, "same-origin"),
    ] {
        headers
            .entry(name)
            .or_insert_with(|| HeaderValue::from_static(value));
    }
}

/// A panicking handler's answer: the generic 500. The panic's text goes to the
/// log (it names the bug) as the answer's cause, with the request's method and
/// path ([`crate::request_log`]), never to the client.
fn answer_panic(panic: Box<dyn Any + Send + 'static>) -> Response {
    let text = panic
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| panic.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("(a panic without a message)");
    WebError::internal()
        .caused_by(error::Cause::new(
            tracing::Level::ERROR,
            format!("a request handler panicked: {text}"),
        ))
        .into_response()
}

/// Gives the answers of the layers below [`harden`]'s error shaping, of axum's
/// body extractors when the body limit cuts a body short, and of axum's other
/// refusals (a path that does not parse, a 415, a 405:
/// `error::rejection_in_shop_shape`) the shop's error shape. They are
/// recognised by what no [`WebError`] has: an empty body without a
/// `Content-Type` (the timeout) or a body that is not JSON.
#[derive(Debug, Clone, Copy)]
pub struct InShopShape;

impl Finish for InShopShape {
    fn finish(self, resp: Response) -> Response {
        in_shop_shape(resp)
    }
}

/// Whether `resp` (of status [`TIMEOUT_STATUS`]) is the timeout's own answer:
/// empty and without a type. (An answer to `HEAD` is empty too by now, but
/// keeps its headers: a 503 of the shop's own, with its `Retry-After`, is not
/// taken for a timeout.)
fn is_timeouts_own(resp: &Response) -> bool {
    http_body::Body::is_end_stream(resp.body())
        && !resp.headers().contains_key(header::CONTENT_TYPE)
}

fn in_shop_shape(resp: Response) -> Response {
    let status = resp.status();
    let empty = is_timeouts_own(&resp);
    let json = resp
        .headers()
        .get(header::CONTENT_TYPE)
        .is_some_and(|v| v == HeaderValue::from_static("application/json"));
    if status == TIMEOUT_STATUS && empty {
        let timeout = WebError::new(
            TIMEOUT_STATUS,
            "timeout",
            "the shop took too long to answer; try again shortly",
        );
        error::in_place_of(resp, timeout)
    } else if status == StatusCode::PAYLOAD_TOO_LARGE && !json {
        let too_large = WebError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "too_large",
            "the request is too large",
        );
        error::in_place_of(resp, too_large)
    } else {
        error::rejection_in_shop_shape(resp)
    }
}

/// Tells a client that sent its body too slowly from a shop that answered too
/// slowly, when the request timeout ends a request: a request whose handler
/// was waiting for the body (read from, not yet ended) answers 408 with
/// `Connection: close`, where a request that timed out anywhere else answers
/// [`TIMEOUT_STATUS`] and is logged as the failure it is.
///
/// A trickling upload is the client's doing, or an attacker's: its cause is
/// logged at `INFO`, the first and then at most once a
/// [`REMINDER`](shop_cache::repeating::REMINDER) with how many there were (a
/// slow-body attack sends them by the hundred a second, and a line each would
/// grow the log at the attack's rate); the others at `DEBUG`. Each is counted in the metrics all the same
/// (`shop_http_requests_total{route="unrouted",status="408"}`).
///
/// Only a request with a body is watched (the body is wrapped: one
/// allocation); one whose body has ended already (none, or
/// `Content-Length: 0`) is passed through as it is.
#[derive(Debug, Clone, Default)]
pub struct BodyWatch {
    /// The slow bodies so far, for the log.
    slow: Arc<Mutex<Repeating>>,
}

impl Start for BodyWatch {
    type Finish = BodyWatched;

    fn start(&self, req: &mut axum::extract::Request) -> BodyWatched {
        if http_body::Body::is_end_stream(req.body()) {
            return BodyWatched(None);
        }
        let state = Arc::new(AtomicU8::new(BODY_UNREAD));
        let body = std::mem::take(req.body_mut());
        *req.body_mut() = axum::body::Body::new(Watched {
            inner: body,
            state: state.clone(),
        });
        BodyWatched(Some((state, self.slow.clone())))
    }
}

impl<S> tower::Layer<S> for BodyWatch {
    type Service = Finished<S, Self>;

    fn layer(&self, inner: S) -> Self::Service {
        Finished::new(inner, self.clone())
    }
}

/// A watched body's state: not read from yet, read from and not ended, ended.
const BODY_UNREAD: u8 = 0;
const BODY_WAITED_FOR: u8 = 1;
const BODY_ENDED: u8 = 2;

/// How far the handler got with the request's body ([`BodyWatch`]), and the
/// watch's count of slow bodies.
#[derive(Debug)]
pub struct BodyWatched(Option<(Arc<AtomicU8>, Arc<Mutex<Repeating>>)>);

impl Finish for BodyWatched {
    fn finish(self, resp: Response) -> Response {
        let Some((state, slow)) = self.0 else {
            return resp;
        };
        let waited_for = state.load(Ordering::Acquire) == BODY_WAITED_FOR;
        if !(waited_for && resp.status() == TIMEOUT_STATUS && is_timeouts_own(&resp)) {
            return resp;
        }
        let cause = {
            let mut slow = slow
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            match slow.again(std::time::Instant::now()) {
                true => error::Cause::new(
                    tracing::Level::INFO,
                    format!(
                        "the client sent its request body too slowly ({} so far; this \
                         line at most once a minute, each one counted in the metrics)",
                        slow.count()
                    ),
                ),
                false => error::Cause::new(
                    tracing::Level::DEBUG,
                    "the client sent its request body too slowly",
                ),
            }
        };
        let slow = WebError::new(
            StatusCode::REQUEST_TIMEOUT,
            "request_timeout",
            "the request's body did not arrive in time",
        )
        .caused_by(cause);
        let mut resp = error::in_place_of(resp, slow);
        resp.headers_mut()
            .insert(header::CONNECTION, HeaderValue::from_static("close"));
        resp
    }
}

pin_project_lite::pin_project! {
    /// A request body that records, in `state`, whether it was read from and
    /// whether it ended.
    struct Watched {
        #[pin]
        inner: axum::body::Body,
        state: Arc<AtomicU8>,
    }
}

impl http_body::Body for Watched {
    type Data = axum::body::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        let mut this = self.project();
        let frame = this.inner.as_mut().poll_frame(cx);
        let state = match &frame {
            std::task::Poll::Ready(None | Some(Err(_))) => BODY_ENDED,
            _ if http_body::Body::is_end_stream(&*this.inner) => BODY_ENDED,
            _ => BODY_WAITED_FOR,
        };
        this.state.store(state, Ordering::Release);
        frame
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}
