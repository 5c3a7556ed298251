//! Cross-site request protection for state-changing requests (POST and the like).
//!
//! A browser says where a request comes from: `Sec-Fetch-Site` (all current
//! browsers) or else `Origin`. A request that says it comes from another site is
//! refused with 403 before any handler runs. Requests that say neither (curl, the
//! load generator, old browsers on same-origin forms) are let through: they cannot
//! be a browser being tricked into sending them cross-site, and `SameSite=Lax`
//! keeps the session cookie off cross-site POSTs from those browsers anyway.
//!
//! An `Origin` is the shop's when it names the request's `Host`, by `https://`
//! when the shop is served over TLS (`--secure-cookies`: a page of the same
//! host over plain HTTP is another origin, one anybody on the network can
//! write), by either scheme otherwise.

use std::convert::Infallible;
use std::future::{Ready, ready};
use std::task::{Context, Poll};

use axum::extract::Request;
use axum::http::header::{HOST, ORIGIN};
use axum::http::{Method, StatusCode};
use axum::response::{IntoResponse, Response};
use futures::future::Either;

use crate::error::WebError;

/// The check, as a tower layer: a request allowed goes to the service below as
/// it is (no box, no clone of the service below per request, as a `from_fn`
/// middleware makes).
#[derive(Debug, Clone, Copy, Default)]
pub struct CsrfLayer {
    /// The shop is served over TLS alone: only an `https://` origin is its own.
    pub https_only: bool,
}

impl<S> tower::Layer<S> for CsrfLayer {
    type Service = Csrf<S>;

    fn layer(&self, inner: S) -> Csrf<S> {
        Csrf(inner, self.https_only)
    }
}

/// The service of [`CsrfLayer`].
#[derive(Debug, Clone)]
pub struct Csrf<S>(S, bool);

impl<S> tower::Service<Request> for Csrf<S>
where
    S: tower::Service<Request, Response = Response, Error = Infallible>,
{
    type Response = Response;
    type Error = Infallible;
    type Future = Either<S::Future, Ready<Result<Response, Infallible>>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.0.poll_ready(cx)
    }

    fn call(&mut self, req: Request) -> Self::Future {
        if allowed(&req, self.1) {
            Either::Left(self.0.call(req))
        } else {
            Either::Right(ready(Ok(refusal())))
        }
    }
}

/// A request that changes nothing, or that comes from the shop's own pages.
fn allowed(req: &Request, https_only: bool) -> bool {
    matches!(*req.method(), Method::GET | Method::HEAD | Method::OPTIONS)
        || same_site(req, https_only)
}

fn refusal() -> Response {
    WebError::new(
        StatusCode::FORBIDDEN,
        "cross_site",
        "this form must be sent from the shop's own pages",
    )
    .into_response()
}

fn same_site(req: &Request, https_only: bool) -> bool {
    let headers = req.headers();
    if let Some(site) = headers.get("sec-fetch-site") {
        return matches!(site.as_bytes(), b"same-origin" | b"none");
    }
    let Some(origin) = headers.get(ORIGIN) else {
        return true;
    };
    let host = headers
        .get(HOST)
        .and_then(|h| h.to_str().ok())
        .unwrap_or("");
    let origin = origin.to_str().unwrap_or("");
    let origin_host = origin
        .strip_prefix("https://")
        .or_else(|| origin.strip_prefix("http://").filter(|_| !https_only))
        .unwrap_or("");
    !host.is_empty() && origin_host.eq_ignore_ascii_case(host)
}
