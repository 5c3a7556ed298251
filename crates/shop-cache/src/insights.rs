//! Shopper insights, the reason the book keeps sessions and carts in Redis:
//! "X% of shoppers who viewed this item bought it" and "shoppers who bought this also
//! bought".
//!
//! - Viewed -> bought: per item and per [`WINDOW`] (a week, counted from the Unix
//!   epoch), a HyperLogLog of the distinct sessions that viewed it
//!   (`viewers:<item>:<window>`, counted in each web process and added by its view
//!   flusher every tenth of a second, in both layouts: see [`crate::session`]) and
//!   one of the sessions that bought it (`buyers:<item>:<window>`).
//!   The figure served covers **the current window and the one before** (the last 7
//!   to 14 days): "X% of the shoppers who viewed this item in the last two weeks
//!   bought it". Each key expires [`WINDOW_TTL`] after it is created, so an item
//!   holds at most three windows of each (the two read and one expiring) and an
//!   item nobody views any more holds nothing after two weeks: memory is bounded by
//!   recent traffic, not by the catalogue's history. HyperLogLog keeps each key small (at most 12 KB,
//!   far less below a few thousand viewers) at the price of a 0.81% standard error
//!   on each count (so about 1.15% relative on their ratio). A shopper is a
//!   session: one who logs in between viewing and buying counts as two sessions.
//! - Also bought: per item, a sorted set of the items bought with it and how often
//!   (`also:<item>`), at most [`ALSO_BOUGHT_CAP`] entries kept by the Space-Saving
//!   algorithm (a newcomer on a full list replaces the least counted entry with that
//!   count plus one): memory is bounded, an item bought with it often enough always
//!   makes the list, and a score overestimates the true count by at most N/cap (N:
//!   the pairs ever recorded for the item), so scores rank, they do not count. Halved by
//!   the view rescaler, so new trends surface. The top [`ALSO_BOUGHT_SHOWN`] are served.
//!   Each view rescale bumps a rescale number; [`Insights::decay`] brings every list
//!   to it, recording per list the number it reached, so a decay that failed half
//!   way is finished by the next step without halving any list twice.
//!
//! Recording an order runs after the order is durable and its failure never fails
//! the order (the caller logs and counts it).

use std::time::Duration;

use crate::RedisConn;

use crate::domain::{ItemId, SessionToken};
use crate::keys::Keys;
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

/// One insights window: viewers and buyers are counted per week.
pub const WINDOW: Duration = Duration::from_secs(7 * 24 * 3600);
/// How long a window's keys live after they are created: the window itself, the next
/// one (while it is read as "the one before"), and a day of slack for clock skew.
pub const WINDOW_TTL: Duration = Duration::from_secs(15 * 24 * 3600);

/// The window a unix time falls in.
pub fn window_of(unix_secs: u64) -> u64 {
    unix_secs / WINDOW.as_secs()
}

/// The window now, by this process's clock.
pub fn current_window() -> u64 {
    window_of(crate::clock::unix_now() as u64)
}

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

    /// "12% of 340 shoppers who viewed this item in the last two weeks bought
    /// it", with its evidence: only once at least `min_viewers` (at least 1)
    /// distinct shoppers viewed it (below that a percentage says more about chance
    /// than about the item; the "0% of shoppers" on an item nobody viewed).
    pub fn viewed_then_bought(&self, min_viewers: u64) -> Option<String> {
        if self.viewers < min_viewers.max(1) {
            return None;
        }
        Some(format!(
            "{}% of {} shoppers who viewed this item {WINDOW_TEXT} bought it.",
            self.viewed_then_bought_percent().round(),
            thousands(self.viewers)
        ))
    }
}

/// The period the viewed-then-bought figure covers, in words.
pub const WINDOW_TEXT: &str = "in the last two weeks";

/// The fewest distinct viewers an item needs before its viewed-then-bought figure
/// is shown (`--insights-min-viewers`).
pub const DEFAULT_MIN_VIEWERS: u64 = 50;

/// `12345` as `12,345`.
fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// Recording and reading insights.
#[derive(Clone)]
pub struct Insights {
    conn: RedisConn,
    keys: Keys,
}

impl Insights {
    /// Insights under `keys`.
    pub fn new(conn: RedisConn, keys: Keys) -> Self {
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
        let window = current_window();
        let mut conn = self.conn.clone();
        if distinct.len() > 1 {
            // Indexed first, so no list exists that the decay cannot find.
            redis::cmd("SADD")
                .arg(self.keys.also_bought_index())
                .arg(&distinct)
                .exec_async(&mut conn)
                .await?;
        }
        // One call per group of items whose keys share a slot (the whole order in
        // the book layout, each item in the cluster layout), sent together.
        let calls = distinct
            .chunks(self.keys.items_per_call(distinct.len()))
            .map(|here| {
                let mut call = scripts::RECORD_ORDER.prepare_invoke();
                for item in here {
                    call.key(self.keys.buyers(*item, window))
                        .key(self.keys.also_bought(*item));
                }
                call.arg(shopper.expose())
                    .arg(ALSO_BOUGHT_CAP)
                    .arg(WINDOW_TTL.as_secs())
                    .arg(here.len())
                    .arg(here)
                    .arg(&distinct);
                let mut conn = conn.clone();
                async move { call.invoke_async::<()>(&mut conn).await }
            });
        futures::future::try_join_all(calls).await?;
        Ok(())
    }

    /// The item's insights over the current window and the one before (zeros for
    /// an item nobody viewed or bought in them).
    pub async fn get(&self, item: ItemId) -> Result<ItemInsights, CacheError> {
        let now = current_window();
        let before = now.saturating_sub(1);
        // PFCOUNT of several keys counts their union: a shopper who viewed in both
        // windows counts once.
        let (viewers, buyers, also): (u64, u64, Vec<(String, f64)>) = redis::pipe()
            .cmd("PFCOUNT")
            .arg(self.keys.viewers(item, now))
            .arg(self.keys.viewers(item, before))
            .cmd("PFCOUNT")
            .arg(self.keys.buyers(item, now))
            .arg(self.keys.buyers(item, before))
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

    /// Removes the viewer and buyer counts of the layout before windows
    /// (`viewers:<item>`, `buyers:<item>`: no window, no expiry, so they would stay
    /// for ever). `shop migrate` runs it once after an upgrade; it walks the
    /// keyspace with `SCAN`, so it never blocks Redis. Returns how many keys it
    /// removed.
    pub async fn remove_unwindowed_counts(&self) -> Result<u64, CacheError> {
        let mut conn = self.conn.clone();
        let mut removed = 0;
        for prefix in self.keys.unwindowed_count_prefixes() {
            let pattern = format!("{prefix}*");
            let mut cursor: u64 = 0;
            loop {
                let (next, found): (u64, Vec<String>) = redis::cmd("SCAN")
                    .arg(cursor)
                    .arg("MATCH")
                    .arg(&pattern)
                    .arg("COUNT")
                    .arg(1_000)
                    .query_async(&mut conn)
                    .await?;
                let old: Vec<&String> = found
                    .iter()
                    .filter(|k| {
                        k.strip_prefix(prefix.as_str())
                            .is_some_and(|rest| rest.parse::<ItemId>().is_ok())
                    })
                    .collect();
                if !old.is_empty() {
                    let n: u64 = redis::cmd("UNLINK")
                        .arg(&old)
                        .query_async(&mut conn)
                        .await?;
                    removed += n;
                }
                if next == 0 {
                    break;
                }
                cursor = next;
            }
        }
        Ok(removed)
    }

    /// Brings every also-bought list to the latest view rescale: each rescale since
    /// the list's last decay halves its counts (dropping those below one half), as
    /// the view rescale halves view counts. Does nothing when the last decay
    /// finished; safe to run in several workers at once and to repeat after a
    /// failure (a list already brought to the rescale is not halved again). Returns
    /// how many lists it halved.
    pub async fn decay(&self) -> Result<u64, CacheError> {
        let mut conn = self.conn.clone();
        let (epoch, done): (Option<u64>, Option<u64>) = redis::pipe()
            .get(self.keys.also_bought_epoch())
            .get(self.keys.also_bought_decayed())
            .query_async(&mut conn)
            .await?;
        let Some(epoch) = epoch.filter(|e| done.is_none_or(|d| d < *e)) else {
            return Ok(0);
        };
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
            let items: Vec<ItemId> = items.iter().filter_map(|i| i.parse().ok()).collect();
            let calls = items
                .chunks(self.keys.items_per_call(DECAY_BATCH))
                .map(|here| {
                    let mut call = scripts::DECAY_ALSO_BOUGHT.prepare_invoke();
                    for item in here {
                        call.key(self.keys.also_bought_list_epochs(*item))
                            .key(self.keys.also_bought(*item));
                    }
                    call.arg(epoch).arg(here);
                    let mut conn = conn.clone();
                    async move { call.invoke_async::<u64>(&mut conn).await }
                });
            lists += futures::future::try_join_all(calls)
                .await?
                .iter()
                .sum::<u64>();
            if next == 0 {
                break;
            }
            cursor = next;
        }
        // Only now is the decay of this rescale done; a failure above leaves it due.
        // Raised, never set back: a slow worker finishing an older rescale's pass
        // must not mark a newer one as still due.
        scripts::RAISE_TO
            .key(self.keys.also_bought_decayed())
            .arg(epoch)
            .invoke_async::<i64>(&mut conn)
            .await?;
        Ok(lists)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seen(viewers: u64, buyers: u64) -> ItemInsights {
        ItemInsights {
            viewers,
            buyers,
            also_bought: Vec::new(),
        }
    }

    #[test]
    fn the_figure_comes_with_its_evidence_and_only_past_the_minimum() {
        assert_eq!(seen(0, 0).viewed_then_bought(50), None);
        assert_eq!(seen(49, 3).viewed_then_bought(50), None);
        assert_eq!(
            seen(340, 41).viewed_then_bought(50).as_deref(),
            Some("12% of 340 shoppers who viewed this item in the last two weeks bought it.")
        );
        assert_eq!(
            seen(12_345, 12_345).viewed_then_bought(50).as_deref(),
            Some("100% of 12,345 shoppers who viewed this item in the last two weeks bought it.")
        );
        assert_eq!(
            seen(1, 0).viewed_then_bought(0).as_deref().map(|t| &t[..2]),
            Some("0%")
        );
    }

    #[test]
    fn thousands_are_separated() {
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(1_000), "1,000");
        assert_eq!(thousands(1_234_567), "1,234,567");
    }
}
