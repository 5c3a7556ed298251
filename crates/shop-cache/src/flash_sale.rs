//! A flash sale decided in Redis: the stock lives in Redis while the sale runs, a buy
//! is one script that refuses or reserves a unit, and only winners reach the
//! database. The seeds' reason: a relational database takes a few thousand writes
//! a second, a sale's buyers send many more, and only `stock` of them can win.
//!
//! The life of a buy:
//! 1. [`FlashSales::reserve`] (one script, one slot: every key of an item's sale
//!    shares the `{f<item>}` tag in the cluster layout) gives the answer this
//!    (user, idempotency key) got before, if any; else refuses outside the sale
//!    window, at the per-user limit or without stock (a refusal is not
//!    remembered: asked again, it is decided again); else
//!    takes one unit from `stock`, counts it for the user, and records a
//!    *reservation* (numbered, with the time by which its order is overdue).
//! 2. The caller writes the order (`shop_db::Db::record_flash_win`), then
//!    [`FlashSales::settle`]s the reservation: confirmed, released (the unit goes
//!    back on sale), refused (back on sale, and the attempt forgotten: the
//!    database refused it and kept nothing) or voided (the database had no unit
//!    for it; forgotten too).
//! 3. If the caller dies in between, the reservation stays pending. The
//!    [`Reconciler`] daemon takes reservations past their deadline and asks the
//!    [`Ledger`] (the database) whether the order exists, fencing it off if not, so
//!    a late order and the unit's return can never both happen; then confirms or
//!    releases. While no reservation is pending it also sets Redis's stock to the
//!    database's if they differ (Redis lost writes, a void), and reloads a sale
//!    Redis lost entirely. A crash thus neither loses a unit (it returns after the
//!    deadline) nor oversells (the database's stock check backs Redis up).
//!
//! The sale pages' live stock comes from here too: [`SaleWatcher`], one per web
//! process, reads every loaded sale every [`WATCH_INTERVAL`] and publishes a
//! [`Board`] that the pages' event streams follow, so "sold out" reaches every open
//! page within a second without a Redis read per page.

use std::time::Duration;

use serde::Serialize;

use crate::domain::{BuyOutcome, ItemId, UserId};
use crate::keys::Keys;
use crate::{CacheError, RedisConn, scripts};

mod board;
mod reconciler;

pub use board::*;
pub use reconciler::*;

/// How long a reservation may wait for its order before the reconciler settles
/// it: well beyond the longest a database write may take before the web tier
/// gives up on it (about 3 s, see `shop_db::db`), short enough that a crashed
/// server's units are back on sale within seconds.
pub const DEFAULT_HOLD: Duration = Duration::from_secs(10);

/// How long a sale's keys outlive its end: its answers stay for retries, and
/// reservations still pending at the end can be settled.
pub const RETAIN_AFTER_END: Duration = Duration::from_secs(24 * 3600);

/// A sale to load: how many units, at what price, when.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct SaleTerms {
    /// Units on sale.
    pub stock: i64,
    /// Sale price in cents.
    pub price_cents: i64,
    /// Start, unix seconds.
    pub start: i64,
    /// End (exclusive), unix seconds.
    pub end: i64,
}

/// A loaded sale as its pages show it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SaleState {
    /// The item on sale.
    pub item_id: ItemId,
    /// Units not yet reserved.
    pub stock: i64,
    /// Start, unix seconds.
    pub start: i64,
    /// End (exclusive), unix seconds.
    pub end: i64,
    /// Sale price in cents.
    pub price_cents: i64,
}

/// What [`FlashSales::reserve`] decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reserve {
    /// A unit is held for this attempt: record its order, then settle it.
    Reserved(Reservation),
    /// The answer: a refusal now, or what this key got before.
    Answered(BuyOutcome),
    /// An earlier request with this key holds a reservation whose order is being
    /// written: its answer comes when it is settled.
    InFlight,
}

/// A unit held in a sale until its order is recorded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reservation {
    /// The sale.
    pub item: ItemId,
    /// Its number in the sale.
    pub number: u64,
}

/// How a reservation ends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Settlement {
    /// The order is in the database.
    Confirm {
        /// The order.
        order_id: i64,
    },
    /// No order, and the database holds this answer for the attempt (an earlier
    /// one, or the reconciler's `expired` fence): the unit goes back on sale and
    /// the attempt's answer becomes this.
    Release(BuyOutcome),
    /// No order, and the database refused it and recorded nothing (a price no
    /// longer the sale's, the sale over, the per-user limit): the unit goes back
    /// on sale and the attempt is forgotten, so asked again it is decided again,
    /// as a refusal in Redis is. Remembered, one account could add an answer a
    /// buy (a wrong price, then a new key) for as long as the sale ran.
    Refuse,
    /// No order, nothing recorded, and no unit to give back (the database had
    /// none left): forgotten as [`Settlement::Refuse`] is.
    Void,
}

/// A reservation past its deadline, for the reconciler.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Overdue {
    /// The reservation.
    pub reservation: Reservation,
    /// Its buyer.
    pub user: UserId,
    /// The buyer's idempotency key.
    pub key: String,
}

/// A sale's counters as the reconciler compares them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Snapshot {
    /// Units not reserved.
    pub stock: i64,
    /// The last reservation's number.
    pub seq: u64,
    /// Reservations not yet settled.
    pub pending: u64,
}

/// The flash sales in Redis.
#[derive(Clone)]
pub struct FlashSales {
    conn: RedisConn,
    keys: Keys,
    hold: Duration,
}

impl FlashSales {
    /// The sales under `keys`, reservations held for [`DEFAULT_HOLD`].
    pub fn new(conn: RedisConn, keys: Keys) -> Self {
        Self {
            conn,
            keys,
            hold: DEFAULT_HOLD,
        }
    }

    /// The same, holding reservations for `hold` (tests shorten it).
    pub fn with_hold(mut self, hold: Duration) -> Self {
        self.hold = hold;
        self
    }

    /// How long a reservation is held before the reconciler settles it.
    pub fn hold(&self) -> Duration {
        self.hold
    }

    /// The five keys of an item's sale, in the order the scripts take them.
    fn sale_keys(&self, item: ItemId) -> [String; 5] {
        [
            self.keys.sale(item),
            self.keys.sale_buyers(item),
            self.keys.sale_answers(item),
            self.keys.sale_pending(item),
            self.keys.sale_held(item),
        ]
    }

    /// Loads a sale of `item` into Redis at `now` (unix seconds). A sale of the
    /// item that has not ended by `now` (running or coming) is changed, not
    /// replaced: what each buyer bought in it still counts toward the per-user
    /// limit, answers given stay, pending reservations settle as usual, and
    /// `terms.stock` is what is left once those are ordered (Redis holds it less
    /// the pending ones). An ended sale is replaced with its buyers, answers and
    /// reservations. `true` if a sale that had not ended was changed.
    pub async fn open(
        &self,
        item: ItemId,
        terms: &SaleTerms,
        now: i64,
    ) -> Result<bool, CacheError> {
        let expire_at = terms.end.saturating_add(RETAIN_AFTER_END.as_secs() as i64);
        let mut script = scripts::SALE_OPEN.prepare_invoke();
        for key in self.sale_keys(item) {
            script.key(key);
        }
        let mut conn = self.conn.clone();
        let changed = script
            .arg(terms.stock)
            .arg(terms.start)
            .arg(terms.end)
            .arg(terms.price_cents)
            .arg(expire_at)
            .arg(now)
            .invoke_async::<i64>(&mut conn)
            .await?
            == 1;
        // The list of sales is its own key (another slot): a second call, and sales
        // long over leave it here.
        redis::pipe()
            .cmd("ZADD")
            .arg(self.keys.sales())
            .arg(terms.end)
            .arg(item)
            .ignore()
            .cmd("ZREMRANGEBYSCORE")
            .arg(self.keys.sales())
            .arg("-inf")
            .arg(format!(
                "({}",
                crate::clock::unix_now() as i64 - RETAIN_AFTER_END.as_secs() as i64
            ))
            .ignore()
            .query_async::<()>(&mut conn)
            .await?;
        Ok(changed)
    }

    /// Ends the sale of `item` at `now` (unix seconds), if one is running or
    /// coming (its item was retired, or `shop sale stop`): later buys are refused as not on sale, and
    /// reservations already made settle as usual. `false` if there was none.
    pub async fn end(&self, item: ItemId, now: i64) -> Result<bool, CacheError> {
        let mut conn = self.conn.clone();
        let ended: i64 = scripts::SALE_END
            .key(self.keys.sale(item))
            .arg(now)
            .invoke_async(&mut conn)
            .await?;
        if ended == 1 {
            // The list of sales is ordered by end (its own key, another slot):
            // the sale leaves it as one that ended now, not at its old end.
            redis::cmd("ZADD")
                .arg(self.keys.sales())
                .arg("XX")
                .arg(now)
                .arg(item)
                .query_async::<()>(&mut conn)
                .await?;
        }
        Ok(ended == 1)
    }

    /// Decides one buy of one unit of `item` by `user` at `now` (unix seconds),
    /// idempotent on `key` (per user and sale), allowing `limit` units per user,
    /// at the sale's price if it is `shown` (else refused as
    /// [`BuyOutcome::PriceChanged`], holding no unit); `None` takes the sale's
    /// price whatever it is. The database checks the price again at the order's
    /// commit: this check only keeps a buy that would be refused there from
    /// holding a unit meanwhile.
    pub async fn reserve(
        &self,
        item: ItemId,
        user: UserId,
        key: &str,
        limit: i64,
        now: i64,
        shown: Option<i64>,
    ) -> Result<Reserve, CacheError> {
        let mut script = scripts::SALE_RESERVE.prepare_invoke();
        for k in self.sale_keys(item) {
            script.key(k);
        }
        let (what, value): (String, String) = script
            .arg(user)
            .arg(key)
            .arg(now)
            .arg(now.saturating_add(self.hold.as_secs().max(1) as i64))
            .arg(limit)
            .arg(shown.map_or(String::new(), |cents| cents.to_string()))
            .invoke_async(&mut self.conn.clone())
            .await?;
        let corrupt = || CacheError::Corrupt {
            what: "sale-answers:",
        };
        match what.as_str() {
            "reserved" => Ok(Reserve::Reserved(Reservation {
                item,
                number: value.parse().map_err(|_| corrupt())?,
            })),
            "refused" | "earlier" => parse_answer(&value).ok_or_else(corrupt),
            _ => Err(corrupt()),
        }
    }

    /// The answer this (user, key) has now, if any (for a retry waiting on one in
    /// flight).
    pub async fn answer(
        &self,
        item: ItemId,
        user: UserId,
        key: &str,
    ) -> Result<Option<Reserve>, CacheError> {
        let answer: Option<String> = redis::cmd("HGET")
            .arg(self.keys.sale_answers(item))
            .arg(format!("{user}:{key}"))
            .query_async(&mut self.conn.clone())
            .await?;
        answer
            .map(|a| {
                parse_answer(&a).ok_or(CacheError::Corrupt {
                    what: "sale-answers:",
                })
            })
            .transpose()
    }

    /// Ends a reservation as `how` says. `false` if it had already been settled
    /// (by the reconciler, or a sale loaded anew): then nothing changed.
    pub async fn settle(
        &self,
        reservation: &Reservation,
        how: Settlement,
    ) -> Result<bool, CacheError> {
        let (mode, answer) = match &how {
            Settlement::Confirm { order_id } => (
                "confirm",
                answer_text(&BuyOutcome::Bought {
                    order_id: *order_id,
                }),
            ),
            Settlement::Release(outcome) => ("release", answer_text(outcome)),
            Settlement::Refuse => ("refuse", String::new()),
            Settlement::Void => ("void", String::new()),
        };
        let mut script = scripts::SALE_SETTLE.prepare_invoke();
        for k in self.sale_keys(reservation.item) {
            script.key(k);
        }
        let settled: i64 = script
            .arg(reservation.number)
            .arg(mode)
            .arg(answer)
            .invoke_async(&mut self.conn.clone())
            .await?;
        Ok(settled == 1)
    }

    /// The sale of `item` as its pages show it, if one is loaded.
    pub async fn state(&self, item: ItemId) -> Result<Option<SaleState>, CacheError> {
        Ok(self.states(&[item]).await?.pop().flatten())
    }

    /// The sales of `items`, in order (`None` where none is loaded).
    pub async fn states(&self, items: &[ItemId]) -> Result<Vec<Option<SaleState>>, CacheError> {
        if items.is_empty() {
            return Ok(Vec::new());
        }
        let mut pipe = redis::pipe();
        for &item in items {
            pipe.cmd("HMGET").arg(self.keys.sale(item)).arg(&[
                "stock",
                "start",
                "end",
                "price_cents",
            ]);
        }
        let rows: Vec<[Option<i64>; 4]> = pipe.query_async(&mut self.conn.clone()).await?;
        Ok(items
            .iter()
            .zip(rows)
            .map(|(&item_id, row)| match row {
                [Some(stock), Some(start), Some(end), Some(price_cents)] => Some(SaleState {
                    item_id,
                    stock,
                    start,
                    end,
                    price_cents,
                }),
                _ => None,
            })
            .collect())
    }

    /// The loaded sales that end after `since` (unix seconds), by item.
    pub async fn listed(&self, since: i64) -> Result<Vec<ItemId>, CacheError> {
        let ids: Vec<String> = redis::cmd("ZRANGEBYSCORE")
            .arg(self.keys.sales())
            .arg(format!("({since}"))
            .arg("+inf")
            .query_async(&mut self.conn.clone())
            .await?;
        ids.iter()
            .map(|id| {
                id.parse()
                    .map_err(|_| CacheError::Corrupt { what: "sales:" })
            })
            .collect()
    }

    /// Up to `max` reservations of `item` whose orders are overdue at `now`.
    pub async fn overdue(
        &self,
        item: ItemId,
        now: i64,
        max: usize,
    ) -> Result<Vec<Overdue>, CacheError> {
        let mut conn = self.conn.clone();
        let numbers: Vec<u64> = redis::cmd("ZRANGEBYSCORE")
            .arg(self.keys.sale_pending(item))
            .arg("-inf")
            .arg(now)
            .arg("LIMIT")
            .arg(0)
            .arg(max)
            .query_async(&mut conn)
            .await?;
        if numbers.is_empty() {
            return Ok(Vec::new());
        }
        let held: Vec<Option<String>> = redis::cmd("HMGET")
            .arg(self.keys.sale_held(item))
            .arg(&numbers)
            .query_async(&mut conn)
            .await?;
        let mut overdue = Vec::with_capacity(numbers.len());
        for (number, held) in numbers.into_iter().zip(held) {
            let reservation = Reservation { item, number };
            let parsed = held.as_deref().and_then(|h| {
                let (user, key) = h.split_once(':')?;
                Some((UserId::new(user.parse().ok()?).ok()?, key.to_owned()))
            });
            match parsed {
                Some((user, key)) => overdue.push(Overdue {
                    reservation,
                    user,
                    key,
                }),
                // Nobody to ask about: there can be no order for it.
                None => {
                    self.settle(&reservation, Settlement::Release(BuyOutcome::Expired))
                        .await?;
                }
            }
        }
        Ok(overdue)
    }

    /// The sale's stock, last reservation number and pending count, if loaded.
    pub async fn snapshot(&self, item: ItemId) -> Result<Option<Snapshot>, CacheError> {
        let ((stock, seq), pending): ((Option<i64>, Option<u64>), u64) = redis::pipe()
            .cmd("HMGET")
            .arg(self.keys.sale(item))
            .arg(&["stock", "seq"])
            .cmd("ZCARD")
            .arg(self.keys.sale_pending(item))
            .query_async(&mut self.conn.clone())
            .await?;
        Ok(match (stock, seq) {
            (Some(stock), Some(seq)) => Some(Snapshot {
                stock,
                seq,
                pending,
            }),
            _ => None,
        })
    }

    /// Sets the stock to `stock` if the sale is as `seen` left it (no reservation
    /// since, none pending). `true` if it changed.
    pub async fn correct(
        &self,
        item: ItemId,
        seen: &Snapshot,
        stock: i64,
    ) -> Result<bool, CacheError> {
        let changed: i64 = scripts::SALE_CORRECT
            .key(self.keys.sale(item))
            .key(self.keys.sale_pending(item))
            .arg(seen.seq)
            .arg(stock)
            .arg(seen.stock)
            .invoke_async(&mut self.conn.clone())
            .await?;
        Ok(changed == 1)
    }
}

/// An outcome as stored for its attempt: its code, and a purchase's order.
fn answer_text(outcome: &BuyOutcome) -> String {
    match outcome {
        BuyOutcome::Bought { order_id } => format!("bought:{order_id}"),
        other => other.code().to_owned(),
    }
}

/// A stored answer: `pending:<n>`, `bought:<order>` or an outcome's code.
fn parse_answer(answer: &str) -> Option<Reserve> {
    if answer.starts_with("pending:") {
        return Some(Reserve::InFlight);
    }
    let outcome = match answer.split_once(':') {
        Some(("bought", order)) => BuyOutcome::from_code("bought", Some(order.parse().ok()?)),
        _ => BuyOutcome::from_code(answer, None),
    }?;
    Some(Reserve::Answered(outcome))
}
