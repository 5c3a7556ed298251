//! Buying in a flash sale: never oversells, at most N per user, only inside the sale
//! window, and a retry with the same `Idempotency-Key` gets the same answer.
//!
//! Design: the database is the one authority over stock. A purchase is one
//! transaction whose first statement is a write (recording the attempt under its
//! (user, key) primary key), so SQLite takes its write lock at once and PostgreSQL
//! makes a concurrent retry with the same key wait for this one and then see its
//! answer. Then, in the same transaction:
//! 1. `UPDATE inventory SET stock = stock - 1 WHERE item_id = $1 AND stock > 0 AND
//!    sale_start <= now AND now < sale_end`: the row lock (PostgreSQL) or the write
//!    lock (SQLite) serialises buyers, and the condition is re-checked after the wait,
//!    so stock can never go below zero (a `CHECK (stock >= 0)` backs this up);
//! 2. an upsert of the user's count for the item that only succeeds below the limit;
//! 3. the order, its line, and the attempt's answer.
//!
//! Any refusal rolls the whole transaction back, then records the refusal for the key.
//! The shown stock comes from the row cache (`inv:<id>`, refreshed every second or
//! so), which may lag; the decision never depends on it. Redis is not on the buying
//! path, so a Redis outage cannot oversell or lose an order.

use serde::Serialize;
use shop_domain::{ItemId, UserId};
use sqlx::Row;

use crate::{Db, DbError};

/// The default most units of one sale item a user may buy.
pub const DEFAULT_PER_USER_LIMIT: i64 = 1;

/// The answer to a purchase attempt.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum BuyOutcome {
    /// Bought one unit; the order is in the database.
    Bought {
        /// The new order.
        order_id: i64,
    },
    /// No stock left.
    SoldOut,
    /// The user already bought the most allowed.
    LimitReached,
    /// The item is not on sale now (before the start, after the end, or never).
    NotOnSale,
    /// No such item.
    UnknownItem,
    /// This Idempotency-Key was used for a different item.
    KeyReused,
}

impl BuyOutcome {
    /// A short name of the outcome, as stored and as counted in metrics.
    pub fn code(&self) -> &'static str {
        match self {
            BuyOutcome::Bought { .. } => "bought",
            BuyOutcome::SoldOut => "sold_out",
            BuyOutcome::LimitReached => "limit_reached",
            BuyOutcome::NotOnSale => "not_on_sale",
            BuyOutcome::UnknownItem => "unknown_item",
            BuyOutcome::KeyReused => "key_reused",
        }
    }

    fn from_code(code: &str, order_id: Option<i64>) -> Result<Self, DbError> {
        Ok(match (code, order_id) {
            ("bought", Some(order_id)) => BuyOutcome::Bought { order_id },
            ("sold_out", _) => BuyOutcome::SoldOut,
            ("limit_reached", _) => BuyOutcome::LimitReached,
            ("not_on_sale", _) => BuyOutcome::NotOnSale,
            ("unknown_item", _) => BuyOutcome::UnknownItem,
            _ => {
                return Err(DbError::Corrupt {
                    what: "flash_attempts.outcome",
                });
            }
        })
    }
}

impl Db {
    /// One purchase of one unit of `item` by `user` at time `now`, idempotent on
    /// `key` (per user). See the module documentation for how it cannot oversell.
    pub async fn flash_buy(
        &self,
        user: UserId,
        item: ItemId,
        key: &str,
        per_user_limit: i64,
        now: i64,
    ) -> Result<BuyOutcome, DbError> {
        let mut tx = self.write.begin().await?;
        let fresh = sqlx::query(
            "INSERT INTO flash_attempts (user_id, idempotency_key, item_id, outcome) \
             VALUES ($1, $2, $3, 'pending') ON CONFLICT (user_id, idempotency_key) DO NOTHING",
        )
        .bind(user.to_i64())
        .bind(key)
        .bind(item.to_i64())
        .execute(&mut *tx)
        .await?
        .rows_affected()
            == 1;
        if !fresh {
            tx.rollback().await?;
            return self.earlier_answer(user, item, key).await;
        }

        let took = sqlx::query(
            "UPDATE inventory SET stock = stock - 1 \
             WHERE item_id = $1 AND stock > 0 AND sale_start <= $2 AND $3 < sale_end \
             RETURNING sale_price_cents",
        )
        .bind(item.to_i64())
        .bind(now)
        .bind(now)
        .fetch_optional(&mut *tx)
        .await?;
        let Some(took) = took else {
            let why = self.why_not(&mut tx, item, now).await?;
            tx.rollback().await?;
            return self.record_refusal(user, item, key, why).await;
        };
        let price: i64 = took.try_get("sale_price_cents")?;

        let claimed = sqlx::query(
            "INSERT INTO flash_claims (user_id, item_id, bought) VALUES ($1, $2, 1) \
             ON CONFLICT (user_id, item_id) DO UPDATE SET bought = flash_claims.bought + 1 \
             WHERE flash_claims.bought < $3",
        )
        .bind(user.to_i64())
        .bind(item.to_i64())
        .bind(per_user_limit)
        .execute(&mut *tx)
        .await?
        .rows_affected()
            == 1;
        if !claimed || per_user_limit < 1 {
            tx.rollback().await?;
            return self
                .record_refusal(user, item, key, BuyOutcome::LimitReached)
                .await;
        }

        let order_id: i64 = sqlx::query(
            "INSERT INTO orders (user_id, idempotency_key, kind, total_cents, created_at) \
             VALUES ($1, $2, 'flash', $3, $4) RETURNING id",
        )
        .bind(user.to_i64())
        .bind(key)
        .bind(price)
        .bind(now)
        .fetch_one(&mut *tx)
        .await?
        .try_get("id")?;
        sqlx::query(
            "INSERT INTO order_lines (order_id, item_id, quantity, price_cents) VALUES ($1, $2, 1, $3)",
        )
        .bind(order_id)
        .bind(item.to_i64())
        .bind(price)
        .execute(&mut *tx)
        .await?;
        sqlx::query(
            "UPDATE flash_attempts SET outcome = 'bought', order_id = $1 \
             WHERE user_id = $2 AND idempotency_key = $3",
        )
        .bind(order_id)
        .bind(user.to_i64())
        .bind(key)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(BuyOutcome::Bought { order_id })
    }

    /// Why the stock update matched nothing: no item, outside the window, or no stock.
    async fn why_not(
        &self,
        tx: &mut sqlx::Transaction<'_, sqlx::Any>,
        item: ItemId,
        now: i64,
    ) -> Result<BuyOutcome, DbError> {
        let row =
            sqlx::query("SELECT stock, sale_start, sale_end FROM inventory WHERE item_id = $1")
                .bind(item.to_i64())
                .fetch_optional(&mut **tx)
                .await?;
        let Some(row) = row else {
            return Ok(BuyOutcome::UnknownItem);
        };
        let start: Option<i64> = row.try_get("sale_start")?;
        let end: Option<i64> = row.try_get("sale_end")?;
        let open = matches!((start, end), (Some(s), Some(e)) if s <= now && now < e);
        Ok(if open {
            BuyOutcome::SoldOut
        } else {
            BuyOutcome::NotOnSale
        })
    }

    async fn record_refusal(
        &self,
        user: UserId,
        item: ItemId,
        key: &str,
        outcome: BuyOutcome,
    ) -> Result<BuyOutcome, DbError> {
        if outcome == BuyOutcome::UnknownItem {
            // Nothing to remember for an item that does not exist (and no foreign key
            // for it); a retry gets the same answer anyway.
            return Ok(outcome);
        }
        sqlx::query(
            "INSERT INTO flash_attempts (user_id, idempotency_key, item_id, outcome) \
             VALUES ($1, $2, $3, $4) ON CONFLICT (user_id, idempotency_key) DO NOTHING",
        )
        .bind(user.to_i64())
        .bind(key)
        .bind(item.to_i64())
        .bind(outcome.code())
        .execute(&self.write)
        .await?;
        // A concurrent attempt with the same key may have answered first: its answer wins.
        self.earlier_answer(user, item, key).await
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
        BuyOutcome::from_code(&outcome, row.try_get("order_id")?)
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
