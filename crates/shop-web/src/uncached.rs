//! The budget for uncached work: what one client address may make the shop
//! render or look up in the database, per [`WINDOW`]. Cached pages never count
//! (they cost a copy, not a render); what does count is every request that
//! reaches a handler behind a page-cache layer (a miss, an item page outside the
//! cached top, a listing page that is not stored, an insights miss) and every
//! search not answered from the search cache. Past the budget: 429 with
//! `Retry-After`, and nothing rendered.
//!
//! Counted in Redis (one script call: [`shop_cache::login_limit::AddressLimit`],
//! the same fixed-window counter as the other per-address limits), so every web
//! server shares one budget per address; IPv6 per /64, with 4x per /56 and 16x
//! per /48. If Redis cannot count, the request goes ahead: the budget guards the
//! CPU, never the shop's availability.

use std::time::Duration;

use axum::extract::{ConnectInfo, Request, State};
use axum::http::HeaderMap;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use shop_cache::login_limit::Attempt;

use crate::AppState;
use crate::auth::client_address;
use crate::error::{Cause, WebError};

/// Renders and database reads one address may cause per [`WINDOW`] by default:
/// 10 a second on average. A person browsing makes a few; an office behind one
/// NAT, a few dozen people clicking around, stays under it; a script fetching
/// searches or deep listings as fast as it can gets 10 a second, about 5% of
/// this 2-core machine (a search costs the database about 5 ms).
pub const DEFAULT_UNCACHED_PER_ADDRESS: u32 = 100;

/// The window the budget is counted over.
pub const WINDOW: Duration = Duration::from_secs(10);

/// Spends one unit of the client's budget: `Err` (429) when it is spent.
pub async fn spend(
    state: &AppState,
    peer: Option<std::net::IpAddr>,
    headers: &HeaderMap,
) -> Result<(), WebError> {
    let Some(address) = client_address(peer, headers, state.config.trust_forwarded_for) else {
        return Ok(());
    };
    match state.uncached.hit(&address).await {
        Ok(Attempt::Allowed) => Ok(()),
        Ok(Attempt::Refused { retry_after }) => {
            state
                .metrics
                .uncached_refused
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            Err(WebError::too_many_requests(
                "too many uncached pages from your address; try again shortly",
                retry_after,
            ))
        }
        Err(error) => {
            if !error.is_failing_fast() {
                Cause::redis(&error, "the uncached-work budget could not be counted").log();
            }
            Ok(())
        }
    }
}

/// The middleware: between a page-cache layer and its handler, where only
/// uncached requests arrive.
pub async fn budget(State(state): State<AppState>, req: Request, next: Next) -> Response {
    let peer = req
        .extensions()
        .get::<ConnectInfo<std::net::SocketAddr>>()
        .map(|ConnectInfo(addr)| addr.ip());
    match spend(&state, peer, req.headers()).await {
        Ok(()) => next.run(req).await,
        Err(refused) => refused.into_response(),
    }
}
