//! How many of something each client address had in this process lately: a
//! count per [`AddressShares::window`] in every block the address is in (an
//! IPv4 address; an IPv6 /64, with 4x per /56 and 16x per /48, as every
//! per-client limit counts them: [`ClientAddress::blocks`]), in memory, so
//! asking costs no Redis call. For what is cheap and frequent enough that a
//! shared count in Redis would cost more than it saves: the item views that
//! count ([`crate::view_shares`]) and logouts of sessions nobody is logged in
//! to ([`crate::auth`]). Behind a balancer each server gives an address its
//! own share (N servers: N shares).

use std::net::Ipv4Addr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use shop_cache::domain::client::ClientAddress;

/// The most blocks one process counts at once (past it, `moka`'s TinyLFU keeps
/// the blocks seen most often: a flooder's, not a block seen once).
pub const MAX_BLOCKS: u64 = 100_000;

/// A block of addresses, as counted here (no text made per ask).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Block {
    V4(Ipv4Addr),
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

/// Each address's count in the current window, per block.
#[derive(Clone)]
pub struct AddressShares {
    per_address: u32,
    window: Duration,
    counts: moka::sync::Cache<Block, Arc<AtomicU32>>,
}

impl AddressShares {
    /// `per_address` a `window` for each address.
    pub fn new(per_address: u32, window: Duration) -> Self {
        Self {
            per_address,
            window,
            counts: moka::sync::Cache::builder()
                .max_capacity(MAX_BLOCKS)
                .time_to_live(window)
                .build(),
        }
    }

    /// The window the shares are counted over (from an address's first ask).
    pub fn window(&self) -> Duration {
        self.window
    }

    /// Takes one of `address`'s share: `true` if it had one left in each of its
    /// blocks. An address not known (`None`: no peer, as in a router driven
    /// without a listener) always has one.
    pub fn take(&self, address: Option<ClientAddress>) -> bool {
        let Some(address) = address else {
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

    #[test]
    fn an_address_has_its_share_and_others_theirs() {
        let shares = AddressShares::new(3, Duration::from_secs(60));
        let taken = |ip: &str, n: usize| {
            let address = ClientAddress::of(ip.parse().unwrap());
            (0..n).filter(|_| shares.take(Some(address))).count()
        };
        assert_eq!(taken("203.0.113.7", 10), 3);
        assert_eq!(taken("203.0.113.8", 2), 2, "another address");
        assert_eq!(taken("203.0.113.8", 2), 1);
        // Rotating through a /64 buys nothing; other /64s of a /56 share 4x.
        assert_eq!(taken("2001:db8:1:200::1", 2), 2);
        assert_eq!(taken("2001:db8:1:200::2", 5), 1);
        let in_56: usize = (0..8u16)
            .map(|i| taken(&format!("2001:db8:1:2{i:02x}::9"), 3))
            .sum();
        assert_eq!(in_56, 12 - 3, "the /56's 4 shares, less the /64 above's");
        // An address not known always has one.
        assert!((0..10).all(|_| shares.take(None)));
    }

    #[test]
    fn a_new_window_gives_a_new_share() {
        let shares = AddressShares::new(1, Duration::from_millis(200));
        let address = Some(ClientAddress::of("198.51.100.9".parse().unwrap()));
        assert!(shares.take(address));
        assert!(!shares.take(address));
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while !shares.take(address) {
            assert!(std::time::Instant::now() < deadline, "no new window");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}
