//! Each client address's share of the item views that count: at most
//! [`ViewShares::per_address`] a [`WINDOW`] count in the `viewed:` ranking, a
//! session's history and an item's viewers; the rest are served as any page is,
//! and counted nowhere. The ranking decides which item pages are cached and
//! what the home page calls popular, so without a share one client (a script
//! fetching one item's cached page as fast as it can, with or without a cookie,
//! whatever its User-Agent, or `/api/me?item=N` in a loop) set it alone: a
//! drill put an item first in 5 s from one address, and with 100,000 items such
//! a client could push real items out of the cached top.
//!
//! Counted in this process's memory, per window, in every block the address is
//! in (an IPv4 address; an IPv6 /64, with 4x per /56 and 16x per /48, as every
//! per-client limit counts them: [`ClientAddress::blocks`]), so a view costs no
//! Redis call and a server behind a balancer gives each address its own share
//! (N servers: N shares). A request whose address is not known (no peer, as in
//! a router driven without a listener) always counts.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use axum::extract::{ConnectInfo, Request};
use shop_cache::domain::client::ClientAddress;

use crate::auth::client_address;

/// Views one address may have counted per [`WINDOW`] by default: 10 a second on
/// average. A person views a page every few seconds at most; an office of a few
/// dozen people behind one address stays under it.
pub const DEFAULT_COUNTED_VIEWS_PER_MINUTE: u32 = 600;

/// The window the share is counted over.
pub const WINDOW: Duration = Duration::from_secs(60);

/// The most blocks one process counts at once (the oldest go first).
pub const MAX_BLOCKS: u64 = 100_000;

/// A block of addresses, as counted here (no text made per view).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Block {
    V4(std::net::Ipv4Addr),
    /// An IPv6 prefix: its first four segments, the ones past its length zeroed,
    /// and its length.
    V6([u16; 4], u8),
}

impl Block {
    /// The blocks `address` counts in, with their multiples of the share.
    fn of(address: ClientAddress) -> impl Iterator<Item = (Block, u32)> {
        let blocks = match address {
            ClientAddress::V4(v4) => [Some((Block::V4(v4), 1)), None, None],
            ClientAddress::V6([a, b, c, d]) => [
                Some((Block::V6([a, b, c, d], 64), 1)),
                Some((Block::V6([a, b, c, d & 0xff00], 56), 4)),
                Some((Block::V6([a, b, c, 0], 48), 16)),
            ],
        };
        blocks.into_iter().flatten()
    }
}

/// The views this process counted lately, per block of addresses.
#[derive(Clone)]
pub struct ViewShares {
    per_address: u32,
    trust_forwarded_for: bool,
    counts: moka::sync::Cache<Block, Arc<AtomicU32>>,
}

impl ViewShares {
    /// `per_address` counted views a [`WINDOW`] per address; the address is the
    /// last `X-Forwarded-For` entry when `trust_forwarded_for` (the shop behind a
    /// proxy it trusts), else the peer's.
    pub fn new(per_address: u32, trust_forwarded_for: bool) -> Self {
        Self {
            per_address,
            trust_forwarded_for,
            counts: moka::sync::Cache::builder()
                .max_capacity(MAX_BLOCKS)
                .time_to_live(WINDOW)
                .build(),
        }
    }

    /// The counted views one address may have per [`WINDOW`].
    pub fn per_address(&self) -> u32 {
        self.per_address
    }

    /// Whether a view by the client of `req` counts: one more of its share, if
    /// it has one left in each of its blocks.
    pub fn counts(&self, req: &Request) -> bool {
        let peer: Option<IpAddr> = req
            .extensions()
            .get::<ConnectInfo<SocketAddr>>()
            .map(|ConnectInfo(addr)| addr.ip());
        let Some(address) = client_address(peer, req.headers(), self.trust_forwarded_for) else {
            return true;
        };
        Block::of(address).all(|(block, shares)| {
            let count = self.counts.get_with(block, || Arc::new(AtomicU32::new(0)));
            count.fetch_add(1, Ordering::Relaxed) < self.per_address.saturating_mul(shares)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn from(ip: &str) -> Request {
        let addr: SocketAddr = (ip.parse::<IpAddr>().unwrap(), 40_000).into();
        let mut req = Request::new(axum::body::Body::empty());
        req.extensions_mut().insert(ConnectInfo(addr));
        req
    }

    #[test]
    fn an_address_has_its_share_and_others_theirs() {
        let shares = ViewShares::new(3, false);
        let counted = |ip: &str, n: usize| (0..n).filter(|_| shares.counts(&from(ip))).count();
        assert_eq!(counted("203.0.113.7", 10), 3);
        assert_eq!(counted("203.0.113.8", 2), 2, "another address");
        assert_eq!(counted("203.0.113.8", 2), 1);
        // Rotating through a /64 buys nothing; other /64s of a /56 share 4x.
        assert_eq!(counted("2001:db8:1:200::1", 2), 2);
        assert_eq!(counted("2001:db8:1:200::2", 5), 1);
        let in_56: usize = (0..8u16)
            .map(|i| counted(&format!("2001:db8:1:2{i:02x}::9"), 3))
            .sum();
        assert_eq!(in_56, 12 - 3, "the /56's 4 shares, less the /64 above's");
        // Without a known address, a view counts.
        let unknown = Request::new(axum::body::Body::empty());
        assert!((0..10).all(|_| shares.counts(&unknown)));
    }

    #[test]
    fn behind_a_trusted_proxy_the_forwarded_address_is_the_client() {
        let shares = ViewShares::new(1, true);
        let via = |client: &str| {
            let mut req = from("10.0.0.1");
            req.headers_mut()
                .insert("x-forwarded-for", client.parse().unwrap());
            shares.counts(&req)
        };
        assert!(via("198.51.100.1"));
        assert!(!via("198.51.100.1"));
        assert!(via("198.51.100.2"), "the proxy's address is not the client");
    }
}
