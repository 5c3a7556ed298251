//! Shopper insights, the reason the book keeps sessions and carts in Redis:
//! "X% of shoppers who viewed this item bought it" and "shoppers who bought this also
//! bought".
//!
//! - Viewed -> bought: per item, a HyperLogLog of the distinct sessions that viewed it
//!   (`viewers:<item>`, added by the session touch in the same round trip as the
//!   view) and one of the sessions that bought it (`buyers:<item>`). HyperLogLog
//!   keeps memory bounded whatever the traffic (at most 12 KB per item, far less for
//!   items with few viewers) at the price of a 0.81% standard error on each count
//!   (so about 1.15% relative on their ratio); exact sets would grow with every
//!   shopper. A shopper is a session: one who logs in between viewing and buying
//!   counts as two sessions.
//! - Also bought: per item, a sorted set of the items bought with it and how often
//!   (`also:<item>`), at most [`ALSO_BOUGHT_CAP`] entries kept by the Space-Saving
//!   algorithm (a newcomer on a full list replaces the least counted entry with that
//!   count plus one): memory is bounded, an item bought with it often enough always
//!   makes the list, and a score overestimates the true count by at most N/cap (N:
//!   the pairs ever recorded for the item), so scores rank, they do not count. Halved by
//!   the view rescaler, so new trends surface. The top [`ALSO_BOUGHT_SHOWN`] are served.
//!
//! Recording an order runs after the order is durable and its failure never fails
//! the order (the caller logs and counts it).

use redis::aio::ConnectionManager;

use crate::domain::ItemId;
use crate::keys::Keys;
use crate::session::SessionToken;
use crate::{CacheError, scripts};

/// How many co-purchased items each also-bought list keeps.
pub const ALSO_BOUGHT_CAP: usize = 50;
/// How many of them are served.
pub const ALSO_BOUGHT_SHOWN: usize = 5;
/// Only the first this-many distinct items of an order are paired (pairs grow as the
/// square of the order size; a huge order must not stall Redis).
pub const MAX_PAIRED_ITEMS: usize = 50;
/// How many lists one decay call halves.
const DECAY_BATCH: usize = 500;

/// What is known about one item.
#[derive(Debug, Clone, PartialEq)]
pub struct ItemInsights {
    /// Distinct sessions that viewed it (estimate).
    pub viewers: u64,
    /// Distinct sessions that bought it (estimate).
    pub buyers: u64,
    /// Items most often bought with it, most often first, with their scores (see the
    /// module documentation: a ranking, not exact counts).
    pub also_bought: Vec<(ItemId, f64)>,
}

impl ItemInsights {
    /// Buyers as a percentage of viewers (0 with no viewers; at most 100).
    pub fn viewed_then_bought_percent(&self) -> f64 {
        if self.viewers == 0 {
            return 0.0;
        }
        (100.0 * self.buyers as f64 / self.viewers as f64).min(100.0)
    }
}

/// Recording and reading insights.
#[derive(Clone)]
pub struct Insights {
    conn: ConnectionManager,
    keys: Keys,
}

impl Insights {
    /// Insights under `keys`.
    pub fn new(conn: ConnectionManager, keys: Keys) -> Self {
        Self { conn, keys }
    }

    /// Records that `shopper` bought `items` together (one order).
    pub async fn record_order(
        &self,
        shopper: &SessionToken,
        items: &[ItemId],
    ) -> Result<(), CacheError> {
        let mut distinct: Vec<ItemId> = Vec::with_capacity(items.len());
        for item in items {
            if !distinct.contains(item) && distinct.len() < MAX_PAIRED_ITEMS {
                distinct.push(*item);
            }
        }
        if distinct.is_empty() {
            return Ok(());
        }
        let mut call = scripts::RECORD_ORDER.key(self.keys.also_bought_index());
        for item in &distinct {
            call.key(self.keys.buyers(*item))
                .key(self.keys.also_bought(*item));
        }
        call.arg(shopper.expose()).arg(ALSO_BOUGHT_CAP);
        for item in &distinct {
            call.arg(*item);
        }
        call.invoke_async::<()>(&mut self.conn.clone()).await?;
        Ok(())
    }

    /// The item's insights (zeros for an item nobody viewed or bought).
    pub async fn get(&self, item: ItemId) -> Result<ItemInsights, CacheError> {
        let (viewers, buyers, also): (u64, u64, Vec<(String, f64)>) = redis::pipe()
            .cmd("PFCOUNT")
            .arg(self.keys.viewers(item))
            .cmd("PFCOUNT")
            .arg(self.keys.buyers(item))
            .cmd("ZRANGE")
            .arg(self.keys.also_bought(item))
            .arg(0)
            .arg(ALSO_BOUGHT_SHOWN - 1)
            .arg("REV")
            .arg("WITHSCORES")
            .query_async(&mut self.conn.clone())
            .await?;
        let also_bought = also
            .into_iter()
            .map(|(id, n)| {
                let id = id
                    .parse()
                    .map_err(|_| CacheError::Corrupt { what: "also:" })?;
                Ok((id, n))
            })
            .collect::<Result<_, CacheError>>()?;
        Ok(ItemInsights {
            viewers,
            buyers,
            also_bought,
        })
    }

    /// Halves every also-bought count (dropping those that fall below one half), as
    /// the view rescale halves view counts. Returns how many lists it went through.
    pub async fn decay(&self) -> Result<u64, CacheError> {
        let mut conn = self.conn.clone();
        let mut cursor: u64 = 0;
        let mut lists = 0;
        loop {
            let (next, items): (u64, Vec<String>) = redis::cmd("SSCAN")
                .arg(self.keys.also_bought_index())
                .arg(cursor)
                .arg("COUNT")
                .arg(DECAY_BATCH)
                .query_async(&mut conn)
                .await?;
            let mut pipe = redis::pipe();
            for item in &items {
                let Ok(item) = item.parse::<ItemId>() else {
                    continue;
                };
                let key = self.keys.also_bought(item);
                pipe.cmd("ZINTERSTORE")
                    .arg(&key)
                    .arg(1)
                    .arg(&key)
                    .arg("WEIGHTS")
                    .arg(0.5)
                    .ignore()
                    .cmd("ZREMRANGEBYSCORE")
                    .arg(&key)
                    .arg("-inf")
                    .arg("(0.5")
                    .ignore();
                lists += 1;
            }
            if !items.is_empty() {
                pipe.exec_async(&mut conn).await?;
            }
            if next == 0 {
                return Ok(lists);
            }
            cursor = next;
        }
    }
}
