//! Flash sale windows in the database: starting and ending one, the units kept
//! back from the item's stock while it runs and given back at its end, and the
//! reads of the sale board and the reconciler.

use shop_domain::ItemId;
use sqlx::Row;

use crate::catalogue::{RowLock, read_items};
use crate::items::item_id;
use crate::{Backend, Db, DbError};

/// A flash sale to start: how many units, at what price, for how long.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sale {
    /// Units on sale.
    pub stock: i64,
    /// Sale price in cents.
    pub price_cents: i64,
    /// Start, unix seconds.
    pub start: i64,
    /// End (exclusive), unix seconds.
    pub end: i64,
}

/// What [`Db::set_sale`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SaleSet {
    /// A new sale is the item's now (it had none, or the one before had ended):
    /// every account may buy up to the limit in it.
    Started {
        /// The units the item had before (a sale's units are taken from them).
        stock_before: i64,
        /// The units kept back for after the sale: what the item had beyond
        /// the sale's (0 for a sale of as many or more).
        held: i64,
    },
    /// The item's sale that had not ended (running, or coming) has these terms
    /// now: what each account bought in it still counts toward the limit.
    Changed {
        /// The units the sale had left before.
        stock_before: i64,
        /// The units kept back for after the sale now: those kept before and
        /// the sale's left, less the sale's new units (0 if those are more).
        held: i64,
    },
    /// There is no such item; nothing changed.
    NoSuchItem,
    /// The item is no longer sold; nothing changed.
    Retired,
    /// The sale's price is above the item's regular price (a sale charges less,
    /// never more); nothing changed.
    AboveRegular {
        /// The item's regular price, in cents.
        regular_cents: i64,
    },
}

impl SaleSet {
    /// Whether the sale is the item's now ([`SaleSet::Started`] or
    /// [`SaleSet::Changed`]); otherwise nothing changed.
    pub fn is_set(&self) -> bool {
        matches!(self, Self::Started { .. } | Self::Changed { .. })
    }
}

impl Db {
    /// Puts an item on sale at `now` (unix seconds): the sale's units are taken
    /// from the item's, the rest kept back (`held_stock`) and given back when
    /// the sale ends ([`Db::return_held_stock`]); a sale of more units than the
    /// item has adds the difference. While the sale has not ended the item's
    /// stock is the sale's units left.
    /// A sale of it that has not ended by `now` gets the new terms and stays the
    /// same sale ([`SaleSet::Changed`]: the users' counts toward the per-user
    /// limit stay, as a limit is per sale); after one that ended, the counts start
    /// again ([`SaleSet::Started`]). Nothing changes unless the answer is one of
    /// those two: an item no longer sold (retired), or whose regular price is
    /// below the sale's, is refused in the same write that would start its sale.
    pub async fn set_sale(&self, id: ItemId, sale: Sale, now: i64) -> Result<SaleSet, DbError> {
        let mut tx = self.begin_write().await?;
        // The item held against a retire until this commits (a retire waiting on
        // it then ends this sale; one that went first is seen here).
        let item = read_items(&mut tx, &[id], RowLock::Share)
            .await?
            .remove(&id);
        let refused = match item {
            None => Some(SaleSet::NoSuchItem),
            Some(item) if item.retired => Some(SaleSet::Retired),
            Some(item) if sale.price_cents > item.price_cents => Some(SaleSet::AboveRegular {
                regular_cents: item.price_cents,
            }),
            Some(_) => None,
        };
        if let Some(refused) = refused {
            tx.rollback().await?;
            return Ok(refused);
        }
        // Held until the commit (on PostgreSQL; SQLite's write transactions
        // run one at a time): what is kept back is worked out from these
        // units, so a win, a checkout or a stock change meanwhile must wait.
        let lock = match tx.backend() {
            Backend::Sqlite => "",
            Backend::Postgres => " FOR UPDATE",
        };
        let before = sqlx::query(&format!(
            "SELECT stock, held_stock, sale_end FROM inventory WHERE item_id = $1{lock}"
        ))
        .bind(id.to_i64())
        .fetch_optional(&mut *tx)
        .await?;
        let (stock_before, held_before, end_before): (i64, i64, Option<i64>) = match before {
            Some(row) => (
                row.try_get("stock")?,
                row.try_get("held_stock")?,
                row.try_get("sale_end")?,
            ),
            None => (0, 0, None),
        };
        // Every unit the item has (those of a sale that ended and were not
        // given back yet included), less the sale's.
        let held = (stock_before + held_before - sale.stock).max(0);
        sqlx::query(
            "UPDATE inventory SET stock = $1, held_stock = $2, sale_price_cents = $3, \
             sale_start = $4, sale_end = $5 WHERE item_id = $6",
        )
        .bind(sale.stock)
        .bind(held)
        .bind(sale.price_cents)
        .bind(sale.start)
        .bind(sale.end)
        .bind(id.to_i64())
        .execute(&mut *tx)
        .await?;
        if end_before.is_some_and(|end| end > now) {
            tx.commit().await?;
            return Ok(SaleSet::Changed { stock_before, held });
        }
        sqlx::query("DELETE FROM flash_claims WHERE item_id = $1")
            .bind(id.to_i64())
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(SaleSet::Started {
            stock_before: stock_before + held_before,
            held,
        })
    }

    /// Gives the units kept back for after a sale ([`Db::set_sale`]) back to
    /// the stock of every item whose sale has ended by `now` (unix seconds);
    /// returns those items (their pages say whether they are in stock). A sale
    /// stopped or an item retired gives its units back at once
    /// ([`Db::end_sale`]); one whose window passed, here: the web servers'
    /// sale-end step calls it, and a stock change or a checkout of the item
    /// does it first for that item.
    pub async fn return_held_stock(&self, now: i64) -> Result<Vec<ItemId>, DbError> {
        // Asked every half second by every web server: a read (on the partial
        // index) first, so a shop with no sale ended takes no write lock.
        let due = sqlx::query(
            "SELECT 1 AS due FROM inventory WHERE held_stock > 0 AND sale_end <= $1 LIMIT 1",
        )
        .bind(now)
        .fetch_optional(&self.read)
        .await?;
        if due.is_none() {
            return Ok(Vec::new());
        }
        let mut tx = self.begin_write().await?;
        let rows = sqlx::query(
            "UPDATE inventory SET stock = stock + held_stock, held_stock = 0 \
             WHERE held_stock > 0 AND sale_end <= $1 RETURNING item_id",
        )
        .bind(now)
        .fetch_all(&mut *tx)
        .await?;
        let items = rows
            .iter()
            .map(|row| item_id(row, "item_id", "inventory.item_id"))
            .collect::<Result<Vec<_>, _>>()?;
        tx.commit().await?;
        Ok(items)
    }

    /// Ends item `id`'s sale at `now` (unix seconds) if it has not ended by
    /// then (running, or not begun yet): the database-decided buy and the
    /// order's commit read this window, so nothing more is sold. Its units
    /// left stay the item's stock, and those kept back for after it are given
    /// back. `false` if there was no such sale.
    pub async fn end_sale(&self, id: ItemId, now: i64) -> Result<bool, DbError> {
        let mut tx = self.begin_write().await?;
        let ended = end_sale_in(&mut tx, id, now).await?;
        tx.commit().await?;
        Ok(ended)
    }

    /// The sales not ended by `now` whose price is above their item's regular
    /// price now (an import lowered it): (item, sale price, regular price). The
    /// database sells nothing of them (see `flash::ON_SALE`).
    pub async fn sales_above_regular(&self, now: i64) -> Result<Vec<(ItemId, i64, i64)>, DbError> {
        let rows = sqlx::query(
            "SELECT v.item_id, v.sale_price_cents, i.price_cents FROM inventory v \
             JOIN items i ON i.id = v.item_id \
             WHERE v.sale_end > $1 AND v.sale_price_cents > i.price_cents \
             AND i.retired_at IS NULL ORDER BY v.item_id",
        )
        .bind(now)
        .fetch_all(&self.read)
        .await?;
        rows.iter()
            .map(|r| {
                let item = item_id(r, "item_id", "inventory.item_id")?;
                Ok((
                    item,
                    r.try_get("sale_price_cents")?,
                    r.try_get("price_cents")?,
                ))
            })
            .collect()
    }

    /// Every sale ending after `since`, by item: its terms as the database holds
    /// them now (the stock is what is left).
    pub async fn sales(&self, since: i64) -> Result<Vec<(ItemId, Sale)>, DbError> {
        let rows = sqlx::query(
            "SELECT v.item_id, v.stock, COALESCE(v.sale_price_cents, i.price_cents) AS price, \
             v.sale_start, v.sale_end FROM inventory v JOIN items i ON i.id = v.item_id \
             WHERE v.sale_end > $1 AND v.sale_start IS NOT NULL ORDER BY v.item_id",
        )
        .bind(since)
        .fetch_all(&self.read)
        .await?;
        rows.iter()
            .map(|r| {
                let item = item_id(r, "item_id", "inventory.item_id")?;
                let sale = Sale {
                    stock: r.try_get("stock")?,
                    price_cents: r.try_get("price")?,
                    start: r.try_get("sale_start")?,
                    end: r.try_get("sale_end")?,
                };
                Ok((item, sale))
            })
            .collect()
    }

    /// The items currently or soon on sale (sale end in the future), by id.
    pub async fn sale_items(&self, now: i64) -> Result<Vec<ItemId>, DbError> {
        let rows =
            sqlx::query("SELECT item_id FROM inventory WHERE sale_end > $1 ORDER BY item_id")
                .bind(now)
                .fetch_all(&self.read)
                .await?;
        rows.iter()
            .map(|r| item_id(r, "item_id", "inventory.item_id"))
            .collect()
    }
}

/// Gives item `id`'s units kept back for after its sale back to its stock in
/// `tx`, if that sale has ended by `now` ([`Db::return_held_stock`] for one
/// item): done first by what reads or changes the item's stock after a sale.
pub(crate) async fn return_held_in(
    tx: &mut crate::write::WriteTx,
    id: ItemId,
    now: i64,
) -> Result<(), DbError> {
    sqlx::query(
        "UPDATE inventory SET stock = stock + held_stock, held_stock = 0 \
         WHERE item_id = $1 AND held_stock > 0 AND (sale_end IS NULL OR sale_end <= $2)",
    )
    .bind(id.to_i64())
    .bind(now)
    .execute(&mut **tx)
    .await?;
    Ok(())
}

/// Ends item `id`'s sale at `now` in `tx` if it has not ended by then (see
/// [`Db::end_sale`]; retiring an item does it too), giving back the units kept
/// for after it: `false` if there was none. A sale not begun yet ends as an
/// empty window (its start is now too).
pub(crate) async fn end_sale_in(
    tx: &mut crate::write::WriteTx,
    id: ItemId,
    now: i64,
) -> Result<bool, DbError> {
    let done = sqlx::query(
        "UPDATE inventory SET sale_end = $1, \
         sale_start = CASE WHEN sale_start > $2 THEN $3 ELSE sale_start END, \
         stock = stock + held_stock, held_stock = 0 \
         WHERE item_id = $4 AND sale_end > $5",
    )
    .bind(now)
    .bind(now)
    .bind(now)
    .bind(id.to_i64())
    .bind(now)
    .execute(&mut **tx)
    .await?;
    Ok(done.rows_affected() == 1)
}
