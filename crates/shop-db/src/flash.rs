//! The flash sale's records in the database: winners' orders, the answer of
//! each attempt that became one (or was fenced off), each user's count. Two designs use it (`--flash-decider`):
//!
//! **Redis decides** (the default; `shop_cache::flash_sale`): a buy is refused or a
//! unit reserved by one Redis script, and only winners reach this module, through
//! [`Db::record_flash_win`]: one transaction that records the attempt under its
//! (user, key) primary key first, takes the unit from `inventory.stock` (a
//! backstop: `stock > 0` and the `CHECK (stock >= 0)` hold even if Redis lost
//! writes), counts it against the user's limit (`flash_claims`, the same backstop)
//! and writes the order. That primary key is also the fence with the reconciler:
//! [`Db::fence_flash`] writes `expired` under it for a reservation whose order never
//! came, so a late order and the unit's return can never both happen.
//!
//! **The database decides** ([`Db::flash_buy`], kept as the baseline the benchmark
//! compares against): every buyer's attempt is a transaction here. The attempt is
//! recorded first (SQLite takes its write lock at once; PostgreSQL makes a
//! concurrent retry with the same key wait and then see this one's order, or
//! decide again after a refusal), then
//! `UPDATE inventory SET stock = stock - 1 WHERE item_id = $1 AND stock > 0 AND`
//! `ON_SALE` (in the sale's window, the item still sold, the sale's price no
//! higher than the item's; the row lock or SQLite's write lock
//! serialises buyers, the condition is re-checked after the wait), the user's count
//! below the limit, the order. Any refusal rolls back and records nothing (asked
//! again, it is decided again). Correct, but the database takes a write per
//! buyer, not per unit.

use shop_domain::{ItemId, UserId};
use sqlx::Row;

use crate::{Db, DbError};

/// The default most units of one sale item a user may buy.
pub const DEFAULT_PER_USER_LIMIT: i64 = 1;

pub use shop_domain::BuyOutcome;

/// What the database made of a unit Redis reserved ([`Db::record_flash_win`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WinRecord {
    /// The order is recorded.
    Ordered {
        /// The new order.
        order_id: i64,
        /// It took the item's last unit (its page, which says "in stock", is to
        /// be purged).
        sold_out: bool,
    },
    /// This (user, key) already has an answer here: an earlier order (a retry whose
    /// first answer Redis no longer had), `expired` (the reconciler gave the unit
    /// back first) or another item's (`KeyReused`). Nothing was written.
    Earlier(BuyOutcome),
    /// The backstop refused (no stock or the user's limit reached here, which means
    /// Redis lost writes). Nothing was written.
    Refused(BuyOutcome),
}

/// The condition (on the `inventory` row of item `$1`, at unix time `$2` = `$3`)
/// that the item is on sale: inside its sale's window, at a sale price no higher
/// than the item's regular price now (a sale never charges more than the item
/// costs: `shop sale start` and `items update` refuse it, and an import that
/// lowered the regular price below it stops the sale here), and still sold. Both
/// deciders check it when they take a unit, whatever Redis holds.
const ON_SALE: &str = "sale_price_cents IS NOT NULL AND sale_start <= $2 AND $3 < sale_end \
     AND EXISTS (SELECT 1 FROM items WHERE id = $1 AND retired_at IS NULL \
     AND price_cents >= inventory.sale_price_cents)";

/// Takes one unit of `item` if it is in stock and on sale ([`ON_SALE`]) at `now`;
/// the row's sale price, or `None` if nothing was taken.
async fn take_one(
    tx: &mut crate::WriteTx,
    item: ItemId,
    now: i64,
) -> Result<Option<sqlx::any::AnyRow>, DbError> {
    Ok(sqlx::query(&format!(
        "UPDATE inventory SET stock = stock - 1 WHERE item_id = $1 AND stock > 0 AND {ON_SALE} \
         RETURNING sale_price_cents, stock"
    ))
    .bind(item.to_i64())
    .bind(now)
    .bind(now)
    .fetch_optional(&mut **tx)
    .await?)
}

impl Db {
    /// One purchase of one unit of `item` by `user` at time `now`, idempotent on
    /// `key` (per user), at the sale's price if it is `shown` (the price the buyer
    /// saw; `None` takes the sale's price as it is at the commit), else refused
    /// ([`BuyOutcome::PriceChanged`]). See the module documentation for how it
    /// cannot oversell.
    pub async fn flash_buy(
        &self,
        user: UserId,
        item: ItemId,
        key: &str,
        per_user_limit: i64,
        now: i64,
        shown: Option<i64>,
    ) -> Result<BuyOutcome, DbError> {
        let mut tx = self.begin_write().await?;
        if !first_attempt(&mut tx, user, item, key).await? {
            tx.rollback().await?;
            return self.earlier_answer(user, item, key).await;
        }

        // A refusal rolls the attempt's row back with the rest: asked again, it is
        // decided again (as in Redis), and a buyer looping refused buys with new
        // keys adds no row. Refusals come in Redis's order (`sale_reserve.lua`):
        // not on sale, the buyer's limit, sold out, the price.
        let took = take_one(&mut tx, item, now).await?;
        let Some(took) = took else {
            let mut why = self.why_not(&mut tx, item, now).await?;
            if why == BuyOutcome::SoldOut && at_limit(&mut tx, user, item, per_user_limit).await? {
                why = BuyOutcome::LimitReached;
            }
            tx.rollback().await?;
            return Ok(why);
        };
        let claimed = claim(&mut tx, user, item, per_user_limit).await?;
        if !claimed || per_user_limit < 1 {
            tx.rollback().await?;
            return Ok(BuyOutcome::LimitReached);
        }

        let price: i64 = took.try_get("sale_price_cents")?;
        if shown.is_some_and(|shown| shown != price) {
            tx.rollback().await?;
            return Ok(BuyOutcome::PriceChanged);
        }

        let order_id = insert_order(&mut tx, user, item, key, price, now).await?;
        tx.commit().await?;
        Ok(BuyOutcome::Bought { order_id })
    }

    /// Why the stock update matched nothing: no item, outside the window, or no stock.
    async fn why_not(
        &self,
        tx: &mut crate::WriteTx,
        item: ItemId,
        now: i64,
    ) -> Result<BuyOutcome, DbError> {
        let row = sqlx::query(&format!(
            "SELECT (SELECT COUNT(*) FROM inventory WHERE item_id = $1 AND {ON_SALE}) AS open \
             FROM inventory WHERE item_id = $1"
        ))
        .bind(item.to_i64())
        .bind(now)
        .bind(now)
        .fetch_optional(&mut **tx)
        .await?;
        let Some(row) = row else {
            return Ok(BuyOutcome::UnknownItem);
        };
        let open: i64 = row.try_get("open")?;
        Ok(if open > 0 {
            BuyOutcome::SoldOut
        } else {
            BuyOutcome::NotOnSale
        })
    }

    async fn earlier_answer(
        &self,
        user: UserId,
        item: ItemId,
        key: &str,
    ) -> Result<BuyOutcome, DbError> {
        let row = sqlx::query(
            "SELECT item_id, outcome, order_id FROM flash_attempts \
             WHERE user_id = $1 AND idempotency_key = $2",
        )
        .bind(user.to_i64())
        .bind(key)
        .fetch_one(&self.read)
        .await?;
        let earlier_item: i64 = row.try_get("item_id")?;
        if earlier_item != item.to_i64() {
            return Ok(BuyOutcome::KeyReused);
        }
        let outcome: String = row.try_get("outcome")?;
        BuyOutcome::from_code(&outcome, row.try_get("order_id")?).ok_or(DbError::Corrupt {
            what: "flash_attempts.outcome",
        })
    }

    /// Records a unit Redis reserved for `user` (the Redis-decided sale, see
    /// `shop_cache::flash_sale`) as an order, idempotent on `key` like
    /// [`Db::flash_buy`]. The attempt's row is written first: its primary key is the
    /// fence between this order and the reconciler giving the unit back
    /// ([`Db::fence_flash`]), so exactly one of the two happens. The stock and the
    /// per-user limit are checked again here as a backstop (they can only refuse if
    /// Redis lost writes), and so is the sale itself: a win for an item retired, or
    /// outside the sale's window, or without a sale price in the database is
    /// refused (`NotOnSale`), whatever Redis still holds. The order is charged the
    /// sale price the database holds at its commit: the one the sale was started
    /// with (a sale started again with another price charges that price from then
    /// on), and only if it is `shown` (the price the buyer saw), else refused
    /// ([`BuyOutcome::PriceChanged`]); `None` takes that price whatever it is.
    pub async fn record_flash_win(
        &self,
        user: UserId,
        item: ItemId,
        key: &str,
        per_user_limit: i64,
        now: i64,
        shown: Option<i64>,
    ) -> Result<WinRecord, DbError> {
        let mut tx = self.begin_write().await?;
        if !first_attempt(&mut tx, user, item, key).await? {
            tx.rollback().await?;
            return Ok(WinRecord::Earlier(
                self.earlier_answer(user, item, key).await?,
            ));
        }
        // Only while the database says the item is on sale ([`ON_SALE`]): Redis
        // decided the buy, but a sale ended or an item retired may not have reached
        // it yet (Redis failing after the change): no such win becomes an order.
        let Some(took) = take_one(&mut tx, item, now).await? else {
            let why = self.why_not(&mut tx, item, now).await?;
            tx.rollback().await?;
            return Ok(WinRecord::Refused(why));
        };
        let price: Option<i64> = took.try_get("sale_price_cents")?;
        let left: i64 = took.try_get("stock")?;
        if !claim(&mut tx, user, item, per_user_limit).await? {
            tx.rollback().await?;
            return Ok(WinRecord::Refused(BuyOutcome::LimitReached));
        }
        if shown.is_some_and(|shown| Some(shown) != price) {
            tx.rollback().await?;
            return Ok(WinRecord::Refused(BuyOutcome::PriceChanged));
        }
        let order_id =
            insert_order(&mut tx, user, item, key, price.unwrap_or_default(), now).await?;
        tx.commit().await?;
        Ok(WinRecord::Ordered {
            order_id,
            sold_out: left == 0,
        })
    }

    /// The reconciler's question about a reservation whose order is overdue: did
    /// (`user`, `key`) become an order for `item`? If nothing was recorded for it,
    /// records `expired` first, so a late [`Db::record_flash_win`] for it can no
    /// longer succeed and the unit can be given back safely. `Some(order)` if the
    /// order exists.
    pub async fn fence_flash(
        &self,
        user: UserId,
        item: ItemId,
        key: &str,
    ) -> Result<Option<i64>, DbError> {
        let mut tx = self.begin_write().await?;
        sqlx::query(
            "INSERT INTO flash_attempts (user_id, idempotency_key, item_id, outcome) \
             VALUES ($1, $2, $3, 'expired') ON CONFLICT (user_id, idempotency_key) DO NOTHING",
        )
        .bind(user.to_i64())
        .bind(key)
        .bind(item.to_i64())
        .execute(&mut *tx)
        .await?;
        let row = sqlx::query(
            "SELECT item_id, outcome, order_id FROM flash_attempts \
             WHERE user_id = $1 AND idempotency_key = $2",
        )
        .bind(user.to_i64())
        .bind(key)
        .fetch_one(&mut *tx)
        .await?;
        tx.commit().await?;
        let (attempt_item, outcome): (i64, String) =
            (row.try_get("item_id")?, row.try_get("outcome")?);
        let order: Option<i64> = row.try_get("order_id")?;
        Ok(order.filter(|_| attempt_item == item.to_i64() && outcome == "bought"))
    }

    /// How many units of `item` the flash-sale orders whose idempotency keys start
    /// with `prefix` hold (one load run's sales, for `shop load`'s check).
    pub async fn flash_units_keyed(&self, item: ItemId, prefix: &str) -> Result<i64, DbError> {
        Ok(sqlx::query(
            "SELECT CAST(COALESCE(SUM(l.quantity), 0) AS BIGINT) AS n FROM order_lines l \
             JOIN orders o ON o.id = l.order_id \
             WHERE l.item_id = $1 AND o.kind = 'flash' AND substr(o.idempotency_key, 1, $2) = $3",
        )
        .bind(item.to_i64())
        .bind(i32::try_from(order_key(prefix).len()).unwrap_or(i32::MAX))
        .bind(order_key(prefix))
        .fetch_one(&self.read)
        .await?
        .try_get("n")?)
    }

    /// How many units of `item` the orders hold in all (for checks and reports).
    pub async fn units_ordered(&self, item: ItemId) -> Result<i64, DbError> {
        Ok(
            sqlx::query("SELECT COUNT(*) AS n FROM order_lines WHERE item_id = $1")
                .bind(item.to_i64())
                .fetch_one(&self.read)
                .await?
                .try_get("n")?,
        )
    }
}

/// Records that `user` tried `key` (answer pending); `false` if they tried it
/// before (then the earlier answer stands).
async fn first_attempt(
    tx: &mut crate::WriteTx,
    user: UserId,
    item: ItemId,
    key: &str,
) -> Result<bool, DbError> {
    Ok(sqlx::query(
        "INSERT INTO flash_attempts (user_id, idempotency_key, item_id, outcome) \
         VALUES ($1, $2, $3, 'pending') ON CONFLICT (user_id, idempotency_key) DO NOTHING",
    )
    .bind(user.to_i64())
    .bind(key)
    .bind(item.to_i64())
    .execute(&mut **tx)
    .await?
    .rows_affected()
        == 1)
}

/// Counts one more unit of `item` for `user`, unless that would pass `limit`.
async fn claim(
    tx: &mut crate::WriteTx,
    user: UserId,
    item: ItemId,
    limit: i64,
) -> Result<bool, DbError> {
    Ok(sqlx::query(
        "INSERT INTO flash_claims (user_id, item_id, bought) VALUES ($1, $2, 1) \
         ON CONFLICT (user_id, item_id) DO UPDATE SET bought = flash_claims.bought + 1 \
         WHERE flash_claims.bought < $3",
    )
    .bind(user.to_i64())
    .bind(item.to_i64())
    .bind(limit)
    .execute(&mut **tx)
    .await?
    .rows_affected()
        == 1)
}

/// Whether `user` has bought `limit` units of `item` (or may buy none).
async fn at_limit(
    tx: &mut crate::WriteTx,
    user: UserId,
    item: ItemId,
    limit: i64,
) -> Result<bool, DbError> {
    let bought: Option<i64> =
        sqlx::query_scalar("SELECT bought FROM flash_claims WHERE user_id = $1 AND item_id = $2")
            .bind(user.to_i64())
            .bind(item.to_i64())
            .fetch_optional(&mut **tx)
            .await?;
    Ok(bought.unwrap_or(0) >= limit)
}

/// What a flash order's key is in `orders`, whose keys a cart's checkouts share:
/// the key as sent after `flash ` (a client's key has no space), so one key
/// used for a buy and a checkout names two orders, not one.
fn order_key(key: &str) -> String {
    format!("flash {key}")
}

/// The order of one sale unit, its line, and the attempt's answer `bought`.
async fn insert_order(
    tx: &mut crate::WriteTx,
    user: UserId,
    item: ItemId,
    key: &str,
    price: i64,
    now: i64,
) -> Result<i64, DbError> {
    let order_id: i64 = sqlx::query(
        "INSERT INTO orders (user_id, idempotency_key, kind, total_cents, created_at) \
         VALUES ($1, $2, 'flash', $3, $4) RETURNING id",
    )
    .bind(user.to_i64())
    .bind(order_key(key))
    .bind(price)
    .bind(now)
    .fetch_one(&mut **tx)
    .await?
    .try_get("id")?;
    sqlx::query(
        "INSERT INTO order_lines (order_id, item_id, quantity, price_cents, title) \
         SELECT $1, $2, 1, $3, title FROM items WHERE id = $2",
    )
    .bind(order_id)
    .bind(item.to_i64())
    .bind(price)
    .execute(&mut **tx)
    .await?;
    sqlx::query(
        "UPDATE flash_attempts SET outcome = 'bought', order_id = $1 \
         WHERE user_id = $2 AND idempotency_key = $3",
    )
    .bind(order_id)
    .bind(user.to_i64())
    .bind(key)
    .execute(&mut **tx)
    .await?;
    Ok(order_id)
}
