//! Each client address's share of the item views that count: at most
//! [`crate::WebConfig::counted_views_per_minute`] a [`WINDOW`] count in the `viewed:` ranking, a
//! session's history and an item's viewers; the rest are served as any page is,
//! and counted nowhere. The ranking decides which item pages are cached and
//! what the home page calls popular, so without a share one client (a script
//! fetching one item's cached page as fast as it can, with or without a cookie,
//! whatever its User-Agent, or `/api/me?item=N` in a loop) set it alone: a
//! drill put an item first in 5 s from one address, and with 100,000 items such
//! a client could push real items out of the cached top.
//!
//! Counted in this process's memory ([`AddressShares`]: per block of
//! addresses, no Redis call per view). A request whose address is not known (no
//! peer, as in a router driven without a listener) always counts.

use std::net::SocketAddr;
use std::time::Duration;

use axum::extract::{ConnectInfo, Request};

use crate::address_shares::AddressShares;
use crate::auth::client_address;

/// Views one address may have counted per [`WINDOW`] by default: 10 a second on
/// average. A person views a page every few seconds at most; an office of a few
/// dozen people behind one address stays under it.
pub const DEFAULT_COUNTED_VIEWS_PER_MINUTE: u32 = 600;

/// The window the share is counted over.
pub const WINDOW: Duration = Duration::from_secs(60);

/// The views this process counted lately, per client address.
#[derive(Clone)]
pub struct ViewShares {
    shares: AddressShares,
    trust_forwarded_for: bool,
}

impl ViewShares {
    /// `per_address` counted views a [`WINDOW`] per address; the address is the
    /// last `X-Forwarded-For` entry when `trust_forwarded_for` (the shop behind a
    /// proxy it trusts), else the peer's.
    pub fn new(per_address: u32, trust_forwarded_for: bool) -> Self {
        Self {
            shares: AddressShares::new(per_address, WINDOW),
            trust_forwarded_for,
        }
    }

    /// Whether a view by the client of `req` counts: one more of its share, if
    /// it has one left.
    pub fn counts(&self, req: &Request) -> bool {
        let peer = req
            .extensions()
            .get::<ConnectInfo<SocketAddr>>()
            .map(|ConnectInfo(addr)| addr.ip());
        self.shares.take(client_address(
            peer,
            req.headers(),
            self.trust_forwarded_for,
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn from(ip: &str) -> Request {
        let addr: SocketAddr = (ip.parse::<std::net::IpAddr>().unwrap(), 40_000).into();
        let mut req = Request::new(axum::body::Body::empty());
        req.extensions_mut().insert(ConnectInfo(addr));
        req
    }

    #[test]
    fn the_peer_is_the_client_unless_a_proxy_is_trusted() {
        let direct = ViewShares::new(1, false);
        assert!(direct.counts(&from("198.51.100.1")));
        assert!(!direct.counts(&from("198.51.100.1")));
        assert!(direct.counts(&from("198.51.100.2")));
        assert!(
            (0..5).all(|_| direct.counts(&Request::new(axum::body::Body::empty()))),
            "no peer: always counted"
        );

        let proxied = ViewShares::new(1, true);
        let via = |client: &str| {
            let mut req = from("10.0.0.1");
            req.headers_mut()
                .insert("x-forwarded-for", client.parse().unwrap());
            proxied.counts(&req)
        };
        assert!(via("198.51.100.1"));
        assert!(!via("198.51.100.1"));
        assert!(via("198.51.100.2"), "the proxy's address is not the client");
    }
}
