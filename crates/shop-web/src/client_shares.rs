//! One client's share of something this process holds a bounded number of (open
//! connections, live sale pages): counted in every block the client's address is
//! in ([`ClientAddress::blocks`]: an IPv6 client's /64, and its /56 and /48 with
//! 4 and 16 times the share), so rotating addresses inside a block buys nothing.
//! In this process's memory: these are this process's own resources.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use shop_cache::domain::client::ClientAddress;

/// The places each block holds now.
#[derive(Debug, Default)]
pub struct Shares {
    by_block: Mutex<HashMap<String, usize>>,
}

/// A place a client holds; dropping it gives the place back in every block.
#[derive(Debug)]
pub struct Share {
    shares: Arc<Shares>,
    blocks: Vec<String>,
}

impl Shares {
    /// Takes a place for `address` (`None`: not known, all such counted as one
    /// address) if each of its blocks holds fewer than its shares of
    /// `per_address`; `None` if one holds that many already.
    pub fn take(
        self: &Arc<Self>,
        address: Option<ClientAddress>,
        per_address: usize,
    ) -> Option<Share> {
        let blocks: Vec<(String, usize)> = match address {
            Some(address) => address
                .blocks()
                .into_iter()
                .map(|b| (b.name, per_address.saturating_mul(b.shares as usize)))
                .collect(),
            None => vec![(String::new(), per_address)],
        };
        let mut by_block = lock(&self.by_block);
        if blocks
            .iter()
            .any(|(block, cap)| by_block.get(block).copied().unwrap_or(0) >= *cap)
        {
            return None;
        }
        for (block, _) in &blocks {
            *by_block.entry(block.clone()).or_default() += 1;
        }
        Some(Share {
            shares: self.clone(),
            blocks: blocks.into_iter().map(|(block, _)| block).collect(),
        })
    }

    /// How many blocks hold a place now (for tests: none is left behind).
    pub fn blocks_held(&self) -> usize {
        lock(&self.by_block).len()
    }
}

impl Drop for Share {
    fn drop(&mut self) {
        let mut by_block = lock(&self.shares.by_block);
        for block in &self.blocks {
            if let Some(n) = by_block.get_mut(block) {
                *n -= 1;
                if *n == 0 {
                    by_block.remove(block);
                }
            }
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv6Addr;

    #[test]
    fn an_ipv6_48_gets_sixteen_64s_worth_and_a_56_four() {
        let shares = Arc::new(Shares::default());
        // /64s in different /56s of one /48: 2 each, 32 in all.
        let mut held = Vec::new();
        for n in 0..100u16 {
            let ip = Ipv6Addr::new(0x2001, 0xdb8, 7, n << 8, 0, 0, 0, 1);
            for _ in 0..3 {
                held.extend(shares.take(Some(ip.into()), 2));
            }
        }
        assert_eq!(held.len(), 32, "16 shares of the /48");
        // /64s of one /56: 8 in all.
        let mut in_56 = Vec::new();
        for n in 0..50u16 {
            let ip = Ipv6Addr::new(0x2001, 0xdb8, 9, n, 0, 0, 0, 1);
            in_56.extend(shares.take(Some(ip.into()), 2));
        }
        assert_eq!(in_56.len(), 8, "4 shares of the /56");
        let other = Ipv6Addr::new(0x2001, 0xdb8, 8, 0, 0, 0, 0, 1);
        assert!(shares.take(Some(other.into()), 2).is_some(), "another /48");
        drop(held);
        drop(in_56);
        assert_eq!(shares.blocks_held(), 0, "no entry left behind");
    }
}
