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
//! - Also bought: "shoppers who bought this also bought", ranked by how much more
//!   often two items were bought together than their popularity alone predicts, not
//!   by raw co-purchase counts (raw counts put the best sellers next to everything:
//!   the "Harry Potter problem" of Linden et al.'s item-to-item filtering, corrected
//!   in Smith and Linden's "Two Decades of Recommender Systems at Amazon.com",
//!   2017, by comparing the count with the one expected). Kept per order, in Redis:
//!   - per item, a sorted set of the items bought with it and how often
//!     (`also:<item>`), at most [`ALSO_BOUGHT_CAP`] entries: a newcomer on a full
//!     list replaces the entry with the least (decayed) count and starts from its
//!     own order, so a count is exactly the orders since its item came in, a lower
//!     bound of the truth, never an inherited guess (Space-Saving lets the newcomer
//!     inherit the count it replaced; those inherited counts pushed out pairs that
//!     had earned theirs, and with the decay below an entry that stopped selling
//!     makes room before a fresh one);
//!   - how many orders held each item (`bought:`) and how many orders there were
//!     (`orders:`).
//!
//!   For item X and a candidate Y with `c` orders known to hold both, the expected
//!   number is `E = orders(X) * orders(Y) / orders`; Y is shown only if `c` is at
//!   least the minimum of co-buyers ([`DEFAULT_MIN_CO_BUYERS`], `--insights-min-co-buyers`)
//!   and `(c - E) / sqrt(E)` (how many standard deviations of a Poisson count over
//!   what popularity predicts) is at least [`MIN_SURPRISE`]; the shown are ranked by
//!   that score. Every count is forward-decayed (Cormode et al.): an order adds a
//!   weight that doubles every [`HALF_LIFE`], so an order two weeks old counts half
//!   as much as today's and nothing is ever rewritten to decay it. Memory is bounded
//!   by the catalogue: one list (at most [`ALSO_BOUGHT_CAP`] entries, a compact
//!   listpack) per item bought with others, one entry per item in `bought:`.
//!   The weight doubles every two weeks from [`LANDMARK`]; the largest sums
//!   (`orders:`) are some 2^24 weights at the seeds' order rate, so a 64-bit float
//!   holds them for about 38 years (until about 2064; then the landmark moves, with
//!   every count divided by the same factor). Weights come from the recording web
//!   server's clock: keep clocks in sync (an order recorded a day ahead weighs 5%
//!   more).
//!
//! Recording an order runs after the order is durable and its failure never fails
//! the order (the caller logs and counts it).

use std::time::Duration;

use crate::RedisConn;

use crate::domain::{ItemId, SessionToken};
use crate::keys::Keys;
use crate::{CacheError, scripts};

/// How many co-purchased items each also-bought list keeps: enough that pairs
/// bought together at a few percent of an item's co-purchases stay on its list
/// through the churn of the long tail (see the evaluation in BENCHMARKS.md), and
/// under Redis's 128 entries of a compact listpack.
pub const ALSO_BOUGHT_CAP: usize = 100;
/// How many also-bought items a page shows.
pub const ALSO_BOUGHT_SHOWN: usize = 5;
/// How many are served, best first: more than shown, so a page can leave out what
/// is already in the shopper's cart (and the web tier what was retired) and
/// usually still show [`ALSO_BOUGHT_SHOWN`].
pub const ALSO_BOUGHT_OFFERED: usize = 10;
/// Only the first this-many distinct items of an order are paired (pairs grow as the
/// square of the order size; a huge order must not stall Redis).
pub const MAX_PAIRED_ITEMS: usize = 50;
/// The fewest orders known to hold both items before one is recommended with the
/// other (`--insights-min-co-buyers`): below it, a high score is chance. Orders
/// are decayed, then rounded to the nearest whole order: three orders of this week
/// are three, three of a month ago one.
pub const DEFAULT_MIN_CO_BUYERS: u64 = 3;
/// The least score (standard deviations over the count popularity predicts) a
/// recommendation needs.
pub const MIN_SURPRISE: f64 = 3.0;
/// How long an order takes to count half as much as a new one, in the also-bought
/// counts: the two weeks the viewed-then-bought figure covers.
pub const HALF_LIFE: Duration = Duration::from_secs(14 * 24 * 3600);
/// The unix time weights are counted from (2026-01-01): an order then weighs 1.
pub const LANDMARK: f64 = 1_767_225_600.0;

/// The weight of an order at `unix_secs`: doubles every [`HALF_LIFE`].
pub fn weight_at(unix_secs: f64) -> f64 {
    ((unix_secs - LANDMARK) / HALF_LIFE.as_secs_f64()).exp2()
}

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
    /// Items bought with it more often than their popularity predicts, best first,
    /// at most [`ALSO_BOUGHT_OFFERED`] (see the module documentation).
    pub also_bought: Vec<AlsoBought>,
}

/// One item recommended beside another.
#[derive(Debug, Clone, PartialEq)]
pub struct AlsoBought {
    /// The item recommended.
    pub item: ItemId,
    /// Orders known to hold both (decayed: an order a half-life old counts half).
    pub co_buyers: f64,
    /// Orders that would hold both if the two were bought independently.
    pub expected: f64,
    /// `(co_buyers - expected) / sqrt(expected)`: the ranking.
    pub score: f64,
}

/// An also-bought candidate as stored: the other item, the orders known to hold
/// both, and how many orders held the other item (none if unknown), all decayed to
/// the same time.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Candidate {
    /// The other item.
    pub item: ItemId,
    /// Orders known to hold both.
    pub co_buyers: f64,
    /// Orders that held the other item.
    pub bought: Option<f64>,
}

/// Whether `co_buyers` decayed orders, to the nearest whole order, reach `min`.
fn enough(co_buyers: f64, min: f64) -> bool {
    co_buyers.round() >= min
}

/// Ranks `candidates` for an item that `bought` orders held out of `orders`:
/// those with at least `min_co_buyers` orders with it and a score of at least
/// [`MIN_SURPRISE`], best first (ties by item id), at most [`ALSO_BOUGHT_OFFERED`].
pub fn rank_also_bought(
    bought: f64,
    orders: f64,
    candidates: &[Candidate],
    min_co_buyers: f64,
) -> Vec<AlsoBought> {
    let mut ranked: Vec<AlsoBought> = candidates
        .iter()
        .filter_map(|c| {
            // Never more orders together than either item was in (counts written
            // by one call each on a cluster may be a moment apart).
            let other = c.bought?;
            let co_buyers = c.co_buyers.min(bought).min(other);
            if !enough(co_buyers, min_co_buyers) {
                return None;
            }
            let expected = bought * other / orders;
            // No popularity known (data from before it was counted): no judgement.
            if !(expected.is_finite() && expected > 0.0) {
                return None;
            }
            let score = (co_buyers - expected) / expected.sqrt();
            (score >= MIN_SURPRISE).then_some(AlsoBought {
                item: c.item,
                co_buyers,
                expected,
                score,
            })
        })
        .collect();
    ranked.sort_by(|a, b| b.score.total_cmp(&a.score).then(a.item.cmp(&b.item)));
    ranked.truncate(ALSO_BOUGHT_OFFERED);
    ranked
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
    min_co_buyers: u64,
}

impl Insights {
    /// Insights under `keys`, recommending an item with another once at least
    /// [`DEFAULT_MIN_CO_BUYERS`] orders held both.
    pub fn new(conn: RedisConn, keys: Keys) -> Self {
        Self {
            conn,
            keys,
            min_co_buyers: DEFAULT_MIN_CO_BUYERS,
        }
    }

    /// The same, recommending an item with another only once at least `n` orders
    /// held both (`--insights-min-co-buyers`; 0 is taken as 1).
    pub fn with_min_co_buyers(mut self, n: u64) -> Self {
        self.min_co_buyers = n.max(1);
        self
    }

    /// Records that `shopper` bought `items` together (one order), now.
    pub async fn record_order(
        &self,
        shopper: &SessionToken,
        items: &[ItemId],
    ) -> Result<(), CacheError> {
        self.record_order_at(shopper, items, crate::clock::unix_now())
            .await
    }

    /// Records one order as placed at `unix_secs` (for tests and for replaying
    /// old orders: the also-bought counts weigh it by its age).
    ///
    /// Redis's work per order of k distinct items (the first [`MAX_PAIRED_ITEMS`]):
    /// one script call on one node (on a cluster, one for the popularity then one
    /// per item, k + 1 round trips, the item calls sent together) running an
    /// `INCRBYFLOAT` and k `ZINCRBY` for the popularity; per item a `PFADD`, with a
    /// `TTL` when the shopper is new to it (and an `EXPIRE` for a new window); per
    /// ordered pair (k(k - 1) of them) a `ZSCORE` and a `ZINCRBY`, or for a
    /// newcomer a `ZSCORE`, then per list with newcomers a `ZCARD`, a `ZPOPMIN`
    /// when full and one `ZADD`. The evaluation's orders (1 to 4 items) average
    /// about 20 commands inside Redis (BENCHMARKS.md).
    pub async fn record_order_at(
        &self,
        shopper: &SessionToken,
        items: &[ItemId],
        unix_secs: f64,
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
        let window = window_of(unix_secs.max(0.0) as u64);
        let weight = weight_at(unix_secs);
        let call = |here: &[ItemId], popularity: bool| {
            let mut call = scripts::RECORD_ORDER.prepare_invoke();
            for item in here {
                call.key(self.keys.buyers(*item, window))
                    .key(self.keys.also_bought(*item));
            }
            if popularity {
                call.key(self.keys.bought()).key(self.keys.orders());
            }
            call.arg(shopper.expose())
                .arg(ALSO_BOUGHT_CAP)
                .arg(WINDOW_TTL.as_secs())
                .arg(here.len())
                .arg(weight)
                .arg(u8::from(popularity))
                .arg(here)
                .arg(&distinct);
            let mut conn = self.conn.clone();
            async move { call.invoke_async::<()>(&mut conn).await }
        };
        if self.keys.layout() == crate::keys::Layout::Book {
            // One node: the whole order in one call, popularity and pairs at once.
            call(&distinct, true).await?;
        } else {
            // A cluster: the popularity first (its own slot), then one call per
            // item's slot, sent together: a failure between them leaves
            // popularity without pairs (scores only lower), never pairs without
            // the popularity they are judged against.
            call(&[], true).await?;
            futures::future::try_join_all(
                distinct
                    .iter()
                    .map(|item| call(std::slice::from_ref(item), false)),
            )
            .await?;
        }
        Ok(())
    }

    /// The item's insights over the current window and the one before (zeros for
    /// an item nobody viewed or bought in them).
    pub async fn get(&self, item: ItemId) -> Result<ItemInsights, CacheError> {
        let now = crate::clock::unix_now();
        let this = window_of(now as u64);
        let before = this.saturating_sub(1);
        // PFCOUNT of several keys counts their union: a shopper who viewed in both
        // windows counts once.
        let (viewers, buyers, list): (u64, u64, Vec<(String, f64)>) = redis::pipe()
            .cmd("PFCOUNT")
            .arg(self.keys.viewers(item, this))
            .arg(self.keys.viewers(item, before))
            .cmd("PFCOUNT")
            .arg(self.keys.buyers(item, this))
            .arg(self.keys.buyers(item, before))
            // Only the entries that may reach the minimum (see `enough`).
            .cmd("ZRANGE")
            .arg(self.keys.also_bought(item))
            .arg((self.min_co_buyers as f64 - 0.5) * weight_at(now))
            .arg("+inf")
            .arg("BYSCORE")
            .arg("WITHSCORES")
            .query_async(&mut self.conn.clone())
            .await?;
        let also_bought = self.also_bought(item, now, list).await?;
        Ok(ItemInsights {
            viewers,
            buyers,
            also_bought,
        })
    }

    /// Ranks an item's stored also-bought list at `now`, reading the candidates'
    /// popularity.
    async fn also_bought(
        &self,
        item: ItemId,
        now: f64,
        list: Vec<(String, f64)>,
    ) -> Result<Vec<AlsoBought>, CacheError> {
        let corrupt = |_| CacheError::Corrupt { what: "also:" };
        let weight = weight_at(now);
        // The list as read holds only entries that may reach the minimum (`get`
        // reads by score); the ranking judges them.
        let mut earned: Vec<(ItemId, f64)> = Vec::with_capacity(list.len());
        for (other, count) in list {
            let other: ItemId = other.parse().map_err(corrupt)?;
            if other != item {
                earned.push((other, count / weight));
            }
        }
        if earned.is_empty() {
            return Ok(Vec::new());
        }
        let (bought, orders): (Vec<Option<f64>>, Option<f64>) = redis::pipe()
            .cmd("ZMSCORE")
            .arg(self.keys.bought())
            .arg(item)
            .arg(earned.iter().map(|(other, _)| *other).collect::<Vec<_>>())
            .cmd("GET")
            .arg(self.keys.orders())
            .query_async(&mut self.conn.clone())
            .await?;
        let (Some(Some(own)), Some(orders)) = (bought.first(), orders) else {
            return Ok(Vec::new());
        };
        let candidates: Vec<Candidate> = earned
            .iter()
            .zip(&bought[1..])
            .map(|((other, co_buyers), n)| Candidate {
                item: *other,
                co_buyers: *co_buyers,
                bought: n.map(|n| n / weight),
            })
            .collect();
        Ok(rank_also_bought(
            own / weight,
            orders / weight,
            &candidates,
            self.min_co_buyers as f64,
        ))
    }

    /// Removes the keys of the also-bought decay before forward decay (a rescale
    /// number, its mark, the index of items with a list and each list's mark), which
    /// nothing reads any more. `shop migrate` runs it once after an upgrade; it walks
    /// the index with `SSCAN`. The lists themselves stay: their old counts weigh
    /// next to nothing against new orders and leave as newcomers replace them.
    /// Returns how many keys it removed.
    pub async fn remove_old_also_bought_decay(&self) -> Result<u64, CacheError> {
        let mut conn = self.conn.clone();
        let [epoch, decayed, index] = self.keys.old_also_bought_decay();
        let mut cursor: u64 = 0;
        let mut marks: std::collections::HashSet<String> = std::collections::HashSet::new();
        loop {
            let (next, items): (u64, Vec<String>) = redis::cmd("SSCAN")
                .arg(&index)
                .arg(cursor)
                .arg("COUNT")
                .arg(500)
                .query_async(&mut conn)
                .await?;
            for item in items.iter().filter_map(|i| i.parse::<ItemId>().ok()) {
                marks.insert(self.keys.old_also_bought_marks(item));
            }
            if next == 0 {
                break;
            }
            cursor = next;
        }
        // One key a command (the keys are in as many slots as items on a cluster),
        // 64 at a time; the index last, so a removal cut short is finished by the
        // next run.
        use futures::StreamExt;
        let removed: Vec<Result<u64, redis::RedisError>> = futures::stream::iter(marks)
            .chain(futures::stream::iter([epoch, decayed]))
            .map(|key| {
                let mut conn = conn.clone();
                async move {
                    redis::cmd("UNLINK")
                        .arg(key)
                        .query_async::<u64>(&mut conn)
                        .await
                }
            })
            .buffer_unordered(64)
            .collect()
            .await;
        let mut total = 0;
        for n in removed {
            total += n?;
        }
        let index: u64 = redis::cmd("UNLINK")
            .arg(&index)
            .query_async(&mut conn)
            .await?;
        Ok(total + index)
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
}

#[cfg(test)]
mod tests;
