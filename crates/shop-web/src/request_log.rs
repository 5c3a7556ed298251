//! The request log: what the shop says of each request, and nothing it must not
//! say. Only the method, the path (never the query string) and, once answered,
//! the status and latency: never a header, so never the session cookie.
//!
//! - the [`Cause`] an error answer carries (what failed below: a store down, a
//!   bug, a panic) is logged once, at its level, with the request's fields
//!   (while a store is known to be down its failures are `debug`: the outage
//!   was logged once when it began, not at every answer);
//! - every other answer of 5xx is a warning (`request failed`), at any log level;
//! - with `debug` on (`SHOP_LOG=debug`), every answer is a line (`answered`),
//!   and the request runs in a `request` span holding its method and path, so
//!   what is logged while it runs says which request it was.
//!
//! The span is made only at `debug`: a span's fields are formatted and stored
//! when it is made, about 3% of a cached page's CPU, at every request, for the
//! few that log anything.

use std::convert::Infallible;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::extract::Request;
use axum::http::{Method, Uri};
use axum::response::Response;
use tracing::Instrument;
use tracing::instrument::Instrumented;

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
    type Future = Finishing<Instrumented<S::Future>, Logged>;

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
        let logged = Logged {
            method: req.method().clone(),
            uri: req.uri().clone(),
            started: Instant::now(),
            verbose,
        };
        Finishing::new(self.inner.call(req).instrument(span), logged)
    }
}

/// What [`RequestLog`] keeps of a request until it is answered.
pub struct Logged {
    method: Method,
    uri: Uri,
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
        let (method, path) = (&self.method, self.uri.path());
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
