//! A breaker per cluster node: which primary serves a command's key (the
//! cluster's slot map, read with `CLUSTER SLOTS` and read again every
//! [`TOPOLOGY_EVERY`]), and that node's [`Breaker`]. A node that misses a
//! budgeted command's time ([`super::RedisConn::with_budget`]) fails the commands
//! whose keys it serves at once until a probe gets through; the other nodes'
//! commands are not held up.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use redis::Value;
use redis::aio::ConnectionLike;
use redis::cluster_async::ClusterConnection;

use super::breaker::{BACKOFF, Breaker};

/// How often the slot map is read again (after a failover, the slots of a lost
/// primary are its replica's from the next read on).
pub const TOPOLOGY_EVERY: Duration = Duration::from_secs(1);

/// How long reading the slot map may take.
const TOPOLOGY_TIMEOUT: Duration = Duration::from_secs(2);

/// The number of hash slots of a Redis Cluster.
const SLOTS: usize = 16_384;

/// One primary and its breaker.
pub(super) struct Node {
    pub(super) addr: String,
    pub(super) breaker: Arc<Breaker>,
}

/// The slot map as last read: each slot's node (an index into `nodes`).
struct Map {
    owner: Vec<u16>,
    nodes: Vec<Node>,
    read_at: Instant,
}

/// The per-node breakers of a cluster handle, and the slot map that routes to
/// them.
#[derive(Default)]
pub(super) struct NodeBreakers {
    map: RwLock<Option<Arc<Map>>>,
    reading: AtomicBool,
}

impl NodeBreakers {
    /// The breaker of the node serving `slot`, if the map is known (read anew in
    /// the background when it is older than [`TOPOLOGY_EVERY`]).
    pub(super) fn of(
        self: &Arc<Self>,
        slot: u16,
        conn: &ClusterConnection,
    ) -> Option<Arc<Breaker>> {
        let map = self.map.read().unwrap_or_else(|e| e.into_inner()).clone();
        if map
            .as_ref()
            .is_none_or(|m| m.read_at.elapsed() >= TOPOLOGY_EVERY)
        {
            self.read_in_background(conn);
        }
        let map = map?;
        let node = *map.owner.get(slot as usize)?;
        map.nodes.get(node as usize).map(|n| n.breaker.clone())
    }

    /// How many primaries' breakers are open now (asked only after a missed
    /// budget: the names it builds cost nothing on the hot path).
    pub(super) fn failing(&self) -> usize {
        self.failing_of_all().0.len()
    }

    /// The primaries whose breaker is open now (their commands fail at once),
    /// of how many (one read of the map and the breakers).
    pub(super) fn failing_of_all(&self) -> (Vec<String>, usize) {
        let map = self.map.read().unwrap_or_else(|e| e.into_inner()).clone();
        map.map(|m| {
            let failing = m
                .nodes
                .iter()
                .filter(|n| n.breaker.is_open())
                .map(|n| n.addr.clone())
                .collect();
            (failing, m.nodes.len())
        })
        .unwrap_or_default()
    }

    fn read_in_background(self: &Arc<Self>, conn: &ClusterConnection) {
        if self
            .reading
            .compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            return;
        }
        let this = self.clone();
        let mut conn = conn.clone();
        tokio::spawn(async move {
            let read = tokio::time::timeout(
                TOPOLOGY_TIMEOUT,
                conn.req_packed_command(redis::cmd("CLUSTER").arg("SLOTS")),
            )
            .await;
            match read {
                Ok(Ok(slots)) => match parse(&slots) {
                    Some(ranges) => this.install(ranges),
                    None => tracing::warn!("CLUSTER SLOTS answered something unexpected"),
                },
                Ok(Err(error)) => tracing::debug!(%error, "could not read the cluster's slot map"),
                Err(_) => tracing::debug!("reading the cluster's slot map timed out"),
            }
            this.reading.store(false, Ordering::Release);
        });
    }

    /// Installs a new map, keeping each node's breaker across reads.
    fn install(&self, ranges: Vec<(u16, u16, String)>) {
        let old = self.map.read().unwrap_or_else(|e| e.into_inner()).clone();
        let mut kept: HashMap<&str, &Arc<Breaker>> = HashMap::new();
        if let Some(old) = &old {
            for node in &old.nodes {
                kept.insert(&node.addr, &node.breaker);
            }
        }
        let mut nodes: Vec<Node> = Vec::new();
        let mut owner = vec![u16::MAX; SLOTS];
        for (start, end, addr) in ranges {
            let index = match nodes.iter().position(|n| n.addr == addr) {
                Some(index) => index,
                None => {
                    let breaker = kept
                        .get(addr.as_str())
                        .map(|b| (*b).clone())
                        .unwrap_or_else(|| Arc::new(Breaker::new(BACKOFF).naming(&addr)));
                    nodes.push(Node { addr, breaker });
                    nodes.len() - 1
                }
            };
            for slot in start..=end.min(SLOTS as u16 - 1) {
                owner[slot as usize] = index as u16;
            }
        }
        let map = Map {
            owner,
            nodes,
            read_at: Instant::now(),
        };
        *self.map.write().unwrap_or_else(|e| e.into_inner()) = Some(Arc::new(map));
    }
}

/// `CLUSTER SLOTS`' answer as (first slot, last slot, primary `host:port`).
fn parse(value: &Value) -> Option<Vec<(u16, u16, String)>> {
    let Value::Array(ranges) = value else {
        return None;
    };
    let int = |v: &Value| match v {
        Value::Int(n) => u16::try_from(*n).ok(),
        _ => None,
    };
    let text = |v: &Value| match v {
        Value::BulkString(b) => String::from_utf8(b.clone()).ok(),
        Value::SimpleString(s) => Some(s.clone()),
        _ => None,
    };
    ranges
        .iter()
        .map(|range| {
            let Value::Array(parts) = range else {
                return None;
            };
            let Value::Array(primary) = parts.get(2)? else {
                return None;
            };
            let host = text(primary.first()?)?;
            let port = match primary.get(1)? {
                Value::Int(n) => *n,
                _ => return None,
            };
            Some((
                int(parts.first()?)?,
                int(parts.get(1)?)?,
                format!("{host}:{port}"),
            ))
        })
        .collect()
}

/// The hash slot of `key` (CRC16/XMODEM of its hash tag, or of the whole key),
/// as Redis Cluster computes it.
pub(crate) fn slot_of(key: &[u8]) -> u16 {
    let tagged = key
        .iter()
        .position(|b| *b == b'{')
        .and_then(|open| {
            let rest = &key[open + 1..];
            let close = rest.iter().position(|b| *b == b'}')?;
            (close > 0).then(|| &rest[..close])
        })
        .unwrap_or(key);
    let mut crc: u16 = 0;
    for byte in tagged {
        crc ^= u16::from(*byte) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc % SLOTS as u16
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_are_the_ones_redis_computes() {
        // `CLUSTER KEYSLOT` of each, as Redis 7 answers.
        assert_eq!(slot_of(b"foo"), 12182);
        assert_eq!(slot_of(b"bar"), 5061);
        assert_eq!(slot_of(b"{user1000}.following"), slot_of(b"user1000"));
        // And as redis-rs routes them, hash tags (empty ones too) included.
        for key in [
            "viewed:",
            "recent:{s7}",
            "{u42}cart",
            "foo{}{bar}",
            "{}foo",
            "a{b}c{d}",
            "{",
            "}{x}",
        ] {
            let ours = redis::cluster_routing::Slot::new(slot_of(key.as_bytes()));
            assert_eq!(
                ours,
                Some(redis::cluster_routing::Slot::for_key(key)),
                "{key}"
            );
        }
    }
}
