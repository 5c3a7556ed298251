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

/// A list of networks (`10.0.0.0/8, 192.168.1.7, fd00::/8`): the reverse
/// proxies a shop behind them takes connections from. An IPv4-mapped IPv6
/// address is matched as IPv4.
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize)]
#[serde(try_from = "String")]
pub struct Networks(Vec<(IpAddr, u8)>);

impl TryFrom<String> for Networks {
    type Error = String;

    fn try_from(text: String) -> Result<Self, String> {
        text.parse()
    }
}

impl Networks {
    /// Loopback and the private networks (RFC 1918, RFC 4193 unique local,
    /// link-local): where a reverse proxy in front of the shop usually connects
    /// from.
    pub fn private() -> Self {
        "127.0.0.0/8, 10.0.0.0/8, 172.16.0.0/12, 192.168.0.0/16, 169.254.0.0/16, \
         ::1/128, fc00::/7, fe80::/10"
            .parse()
            .expect("the private networks parse")
    }

    /// Whether `ip` is in one of the networks.
    pub fn contains(&self, ip: IpAddr) -> bool {
        let ip = ip.to_canonical();
        self.0
            .iter()
            .any(|&(net, len)| net.is_ipv4() == ip.is_ipv4() && first_of(ip, len) == net)
    }
}

/// The first address of `address`'s network of `len` bits.
fn first_of(address: IpAddr, len: u8) -> IpAddr {
    match address {
        IpAddr::V4(v4) => {
            let mask = u32::MAX.checked_shl(32 - u32::from(len)).unwrap_or(0);
            IpAddr::V4((u32::from(v4) & mask).into())
        }
        IpAddr::V6(v6) => {
            let mask = u128::MAX.checked_shl(128 - u32::from(len)).unwrap_or(0);
            IpAddr::V6((u128::from(v6) & mask).into())
        }
    }
}

impl std::str::FromStr for Networks {
    type Err = String;

    /// Comma-separated addresses or networks (`address/length`); at least one.
    /// A network's address is kept as its first (`10.0.0.1/8` is `10.0.0.0/8`).
    fn from_str(text: &str) -> Result<Self, String> {
        let mut networks = Vec::new();
        for part in text.split(',').map(str::trim) {
            let (address, len) = match part.split_once('/') {
                Some((address, len)) => (address, Some(len)),
                None => (part, None),
            };
            let bad = || format!("{part:?} is not an address or a network (address/length)");
            let address: IpAddr = address.parse().map_err(|_| bad())?;
            let address = address.to_canonical();
            let most = if address.is_ipv4() { 32 } else { 128 };
            let len = match len {
                Some(len) => len
                    .parse::<u8>()
                    .ok()
                    .filter(|&len| len <= most)
                    .ok_or_else(bad)?,
                None => most,
            };
            networks.push((first_of(address, len), len));
        }
        Ok(Self(networks))
    }
}

impl fmt::Display for Networks {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, (address, len)) in self.0.iter().enumerate() {
            let sep = if i == 0 { "" } else { ", " };
            write!(f, "{sep}{address}/{len}")?;
        }
        Ok(())
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

    #[test]
    fn networks_parse_and_match() {
        let nets: Networks = "10.0.0.0/8, 192.168.1.7, fd00::/8".parse().unwrap();
        let ip = |text: &str| text.parse::<IpAddr>().unwrap();
        assert!(nets.contains(ip("10.200.3.4")));
        assert!(nets.contains(ip("::ffff:10.1.1.1")), "IPv4-mapped as IPv4");
        assert!(nets.contains(ip("192.168.1.7")));
        assert!(!nets.contains(ip("192.168.1.8")));
        assert!(nets.contains(ip("fd12::1")));
        assert!(!nets.contains(ip("2001:db8::1")));
        assert!(!nets.contains(ip("11.0.0.1")));
        assert_eq!(nets.to_string(), "10.0.0.0/8, 192.168.1.7/32, fd00::/8");
        let loose: Networks = "10.1.2.3/8, fd12::1/16".parse().unwrap();
        assert_eq!(loose.to_string(), "10.0.0.0/8, fd12::/16");
        let every: Networks = "0.0.0.0/0, ::/0".parse().unwrap();
        assert!(every.contains(ip("203.0.113.9")) && every.contains(ip("2001:db8::1")));
        for bad in [
            "",
            "10.0.0.0/33",
            "fd00::/129",
            "example.com",
            "10.0.0.0/x",
            "1.2.3.4,",
        ] {
            assert!(bad.parse::<Networks>().is_err(), "{bad:?}");
        }
        let private = Networks::private();
        assert!(private.contains(ip("127.0.0.1")) && private.contains(ip("172.31.255.1")));
        assert!(!private.contains(ip("172.32.0.1")) && !private.contains(ip("8.8.8.8")));
    }
}
