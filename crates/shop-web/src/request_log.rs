//! The request log: what the shop says of each request, and nothing it must not
//! say. Only the method, the path (never the query string) and, once answered,
//! the status and latency: never a header, so never the session cookie.
//!
//! - the [`Cause`] an error answer carries (what failed below: a store down, a
//!   bug, a panic) is logged once, at its level, with the request's fields
//!   (while a store is known to be down its failures are `debug`: the outage
//!   was logged once when it began, not at every answer);
//! - every other answer of 5xx is a warning (`request failed`), at any log level;
//! - what is logged while a request runs (a store it goes on without, a write
//!   left for a daemon to finish) says which request it was: at `info` a line
//!   formatted by [`NamedRequests`] (the shop's log format) ends with the
//!   request's `method=` and `path=`, from a task-local the layer sets;
//! - with `debug` on (`SHOP_LOG=debug`), every answer is a line (`answered`),
//!   and the request runs in a `request` span holding its method and path
//!   instead.
//!
//! The span is made only at `debug`: a span's fields are formatted and stored
//! when it is made, about 3% of a cached page's CPU, at every request, for the
//! few that log anything. The task-local costs a clone of the method and the
//! URI (which shares the request's buffer), and is read only by a line logged.

use std::convert::Infallible;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::extract::Request;
use axum::http::{Method, Uri};
use axum::response::Response;
use tokio::task::futures::TaskLocalFuture;
use tracing::Instrument;
use tracing::instrument::Instrumented;
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;

use crate::answered::{Finish, Finishing};
use crate::error::Cause;

/// Logs every request of the service it wraps (see the module documentation).
#[derive(Debug, Clone, Copy, Default)]
pub struct RequestLogLayer;

impl<S> tower::Layer<S> for RequestLogLayer {
    type Service = RequestLog<S>;

    fn layer(&self, inner: S) -> RequestLog<S> {
        RequestLog { inner }
    }
}

/// The service of [`RequestLogLayer`].
#[derive(Debug, Clone)]
pub struct RequestLog<S> {
    inner: S,
}

impl<S> tower::Service<Request> for RequestLog<S>
where
    S: tower::Service<Request, Response = Response, Error = Infallible>,
{
    type Response = Response;
    type Error = Infallible;
    type Future = Finishing<TaskLocalFuture<Option<Serving>, Instrumented<S::Future>>, Logged>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request) -> Self::Future {
        let verbose = tracing::enabled!(tracing::Level::DEBUG);
        let span = match verbose {
            true => tracing::debug_span!(
                "request",
                method = %req.method(),
                path = %req.uri().path(),
            ),
            false => tracing::Span::none(),
        };
        // Cheap: a known method is a tag, and the URI shares the request's buffer.
        let serving = Serving {
            method: req.method().clone(),
            uri: req.uri().clone(),
        };
        let logged = Logged {
            request: serving.clone(),
            started: Instant::now(),
            verbose,
        };
        // At `debug` the span names the request.
        let answer = SERVING.scope(
            (!verbose).then_some(serving),
            self.inner.call(req).instrument(span),
        );
        Finishing::new(answer, logged)
    }
}

tokio::task_local! {
    /// The request the running task serves, for [`NamedRequests`] (none at
    /// `debug`, where the `request` span says it).
    static SERVING: Option<Serving>;
}

/// The request a task serves: its method and path.
#[derive(Clone)]
pub struct Serving {
    method: Method,
    uri: Uri,
}

/// A log format: `F`'s lines, and a line logged while the [`RequestLogLayer`]
/// serves a request (at `info`) ends with the request's `method=` and `path=`
/// (never its query string). The shop's binary formats its log with it:
///
/// ```
/// tracing_subscriber::fmt()
///     .map_event_format(shop_web::request_log::NamedRequests)
///     .finish();
/// ```
///
/// It appends plain text, so it is for the text formats (`full`, `compact`,
/// the default), not `json`. Such a line is written without colours on a
/// terminal (`F` writes it into a writer that cannot say it may have them).
#[derive(Debug, Clone, Copy, Default)]
pub struct NamedRequests<F>(pub F);

impl<S, N, F> FormatEvent<S, N> for NamedRequests<F>
where
    S: tracing::Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
    F: FormatEvent<S, N>,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &tracing::Event<'_>,
    ) -> std::fmt::Result {
        let serving = SERVING.try_with(Option::clone).ok().flatten();
        let Some(Serving { method, uri }) = serving else {
            return self.0.format_event(ctx, writer, event);
        };
        let mut line = HeldNewline {
            out: &mut writer,
            held: false,
        };
        self.0.format_event(ctx, Writer::new(&mut line), event)?;
        writeln!(writer, " method={method} path={}", uri.path())
    }
}

/// Writes through to `out` but holds back a line's final newline, so more can
/// be said on that line.
struct HeldNewline<'a, W> {
    out: &'a mut W,
    held: bool,
}

impl<W: std::fmt::Write> std::fmt::Write for HeldNewline<'_, W> {
    fn write_str(&mut self, text: &str) -> std::fmt::Result {
        if text.is_empty() {
            return Ok(());
        }
        if std::mem::take(&mut self.held) {
            self.out.write_char('\n')?;
        }
        match text.strip_suffix('\n') {
            Some(text) => {
                self.held = true;
                self.out.write_str(text)
            }
            None => self.out.write_str(text),
        }
    }
}

/// What [`RequestLog`] keeps of a request until it is answered.
pub struct Logged {
    request: Serving,
    started: Instant,
    verbose: bool,
}

impl Finish for Logged {
    fn finish(self, resp: Response) -> Response {
        let failed = resp.status().is_server_error();
        let cause = resp.extensions().get::<Cause>();
        if cause.is_none() && !failed && !self.verbose {
            return resp;
        }
        let latency_us = as_micros(self.started.elapsed());
        let (method, path) = (&self.request.method, self.request.uri.path());
        let status = resp.status().as_u16();
        match cause {
            Some(cause) => cause.log_answer(method, path, status, latency_us),
            None if failed => {
                tracing::warn!(%method, %path, status, latency_us, "request failed")
            }
            None => tracing::debug!(%method, %path, status, latency_us, "answered"),
        }
        resp
    }
}

fn as_micros(latency: Duration) -> u64 {
    u64::try_from(latency.as_micros()).unwrap_or(u64::MAX)
}
