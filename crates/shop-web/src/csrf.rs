//! Cross-site request protection for state-changing requests (POST and the like).
//!
//! A browser says where a request comes from: `Sec-Fetch-Site` (all current
//! browsers) or else `Origin`. A request that says it comes from another site is
//! refused with 403 before any handler runs. Requests that say neither (curl, the
//! load generator, old browsers on same-origin forms) are let through: they cannot
//! be a browser being tricked into sending them cross-site, and `SameSite=Lax`
//! keeps the session cookie off cross-site POSTs from those browsers anyway.

use axum::extract::Request;
use axum::http::header::{HOST, ORIGIN};
use axum::http::{Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::error::WebError;

/// The middleware.
pub async fn protect(req: Request, next: Next) -> Response {
    if matches!(*req.method(), Method::GET | Method::HEAD | Method::OPTIONS) || same_site(&req) {
        return next.run(req).await;
    }
    WebError::new(
        StatusCode::FORBIDDEN,
        "cross_site",
        "this form must be sent from the shop's own pages",
    )
    .into_response()
}

fn same_site(req: &Request) -> bool {
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
        .strip_prefix("http://")
        .or_else(|| origin.strip_prefix("https://"))
        .unwrap_or("");
    !host.is_empty() && origin_host.eq_ignore_ascii_case(host)
}
