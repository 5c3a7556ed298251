//! A client's address as every per-client limit counts it (logins, sign-ups, live
//! pages): an IPv4 address, or the IPv6 /64 a subscriber usually holds, which is
//! also counted in its /56 (a household's usual allocation) and /48 (a site's),
//! each allowed a multiple of the /64's share. Without the wider blocks one /48
//! would have 65,536 times the allowance of one /64. Made once, in the web tier,
//! from the peer (or the trusted proxy's header), and handed to every limiter as
//! this type: no limiter parses an address back out of text.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// A client address, as the limits count it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ClientAddress {
    /// One IPv4 address.
    V4(Ipv4Addr),
    /// An IPv6 /64: its first four segments.
    V6([u16; 4]),
}

/// A block of addresses a client is counted in, and the multiple of the
/// per-address share it may use.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Block {
    /// The block as text (`203.0.113.7`, `2001:db8:1:2::/64`): a counter's name.
    pub name: String,
    /// How many per-address shares the block may use.
    pub shares: u32,
}

impl ClientAddress {
    /// The address `ip` is counted under (an IPv4-mapped IPv6 address as IPv4).
    pub fn of(ip: IpAddr) -> Self {
        match ip.to_canonical() {
            IpAddr::V4(v4) => Self::V4(v4),
            IpAddr::V6(v6) => {
                let s = v6.segments();
                Self::V6([s[0], s[1], s[2], s[3]])
            }
        }
    }

    /// Every block this client counts in, the narrowest first: its IPv4 address
    /// alone (one share), or its /64 (one), /56 (4) and /48 (16).
    pub fn blocks(&self) -> Vec<Block> {
        match *self {
            Self::V4(_) => vec![Block {
                name: self.to_string(),
                shares: 1,
            }],
            Self::V6([a, b, c, d]) => vec![
                Block {
                    name: self.to_string(),
                    shares: 1,
                },
                Block {
                    name: format!("{a:x}:{b:x}:{c:x}:{:x}::/56", d & 0xff00),
                    shares: 4,
                },
                Block {
                    name: format!("{a:x}:{b:x}:{c:x}::/48"),
                    shares: 16,
                },
            ],
        }
    }
}

impl fmt::Display for ClientAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::V4(v4) => write!(f, "{v4}"),
            Self::V6([a, b, c, d]) => write!(f, "{a:x}:{b:x}:{c:x}:{d:x}::/64"),
        }
    }
}

impl From<Ipv6Addr> for ClientAddress {
    fn from(v6: Ipv6Addr) -> Self {
        Self::of(IpAddr::V6(v6))
    }
}

impl From<Ipv4Addr> for ClientAddress {
    fn from(v4: Ipv4Addr) -> Self {
        Self::V4(v4)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(address: ClientAddress) -> Vec<(String, u32)> {
        address
            .blocks()
            .into_iter()
            .map(|b| (b.name, b.shares))
            .collect()
    }

    #[test]
    fn an_ipv6_client_counts_in_its_64_56_and_48() {
        let a = ClientAddress::of("2001:db8:1:2a3:aaaa::1".parse().unwrap());
        let b = ClientAddress::of("2001:db8:1:2a3:bbbb::9".parse().unwrap());
        assert_eq!(a, b, "one /64");
        assert_eq!(
            names(a),
            [
                ("2001:db8:1:2a3::/64".to_owned(), 1),
                ("2001:db8:1:200::/56".to_owned(), 4),
                ("2001:db8:1::/48".to_owned(), 16),
            ]
        );
    }

    #[test]
    fn an_ipv4_client_is_its_address_even_mapped_into_ipv6() {
        let mapped = ClientAddress::of("::ffff:192.0.2.1".parse().unwrap());
        assert_eq!(mapped, ClientAddress::V4("192.0.2.1".parse().unwrap()));
        assert_eq!(names(mapped), [("192.0.2.1".to_owned(), 1)]);
    }
}
