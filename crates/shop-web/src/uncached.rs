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
//!
//! A refused address is remembered in this process until its `Retry-After`
//! ([`Refusals`], bounded): its next requests are refused without asking Redis,
//! so a client flooding searches past its budget costs each server an HTTP
//! exchange per request, not a Redis call as well (behind a page-cache layer the
//! layer's own lookup and render lock still come first: see the note on moving
//! the check before them in the closing note). And the refusal is sent after
//! [`TARPIT`] (or the `Retry-After`, if sooner): a client that sends its next
//! request when the last is answered (every browser, most scripts) then sends one
//! a second per connection instead of thousands, and cannot take the other
//! clients' share of the server by sheer speed (a wait costs the server a timer,
//! and the per-address share of the connection cap bounds how many wait).

use std::time::{Duration, Instant};

use axum::extract::{ConnectInfo, Request, State};
use axum::http::HeaderMap;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use shop_cache::domain::client::ClientAddress;
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

/// How long a refusal is held before it is sent.
pub const TARPIT: Duration = Duration::from_secs(1);

/// The most refused addresses one process remembers.
pub const MAX_REFUSALS: u64 = 100_000;

/// The addresses this process refused lately, each until its `Retry-After`.
pub struct Refusals(moka::sync::Cache<ClientAddress, Instant>);

impl Default for Refusals {
    fn default() -> Self {
        Self(
            moka::sync::Cache::builder()
                .max_capacity(MAX_REFUSALS)
                .time_to_live(WINDOW)
                .build(),
        )
    }
}

impl Refusals {
    /// How long `address` is still refused, if it is.
    fn remaining(&self, address: &ClientAddress) -> Option<Duration> {
        let until = self.0.get(address)?;
        until.checked_duration_since(Instant::now())
    }
}

fn refused(state: &AppState, retry_after: Duration) -> WebError {
    state
        .metrics
        .uncached_refused
        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    WebError::too_many_requests(
        "too many uncached pages from your address; try again shortly",
        retry_after,
    )
}

/// Spends one unit of the client's budget: `Err` (429) when it is spent.
pub async fn spend(
    state: &AppState,
    peer: Option<std::net::IpAddr>,
    headers: &HeaderMap,
) -> Result<(), WebError> {
    let Some(address) = client_address(peer, headers, state.config.trust_forwarded_for) else {
        return Ok(());
    };
    if let Some(retry_after) = state.uncached_refusals.remaining(&address) {
        tokio::time::sleep(TARPIT.min(retry_after)).await;
        return Err(refused(state, retry_after));
    }
    match state.uncached.hit(&address).await {
        Ok(Attempt::Allowed) => Ok(()),
        Ok(Attempt::Refused { retry_after }) => {
            state
                .uncached_refusals
                .0
                .insert(address, Instant::now() + retry_after);
            tokio::time::sleep(TARPIT.min(retry_after)).await;
            Err(refused(state, retry_after))
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
