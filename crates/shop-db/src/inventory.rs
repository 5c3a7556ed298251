//! Stock and sale windows: what the row cache copies into Redis (`inv:<id>`).

use std::collections::HashMap;

use serde::Serialize;
use shop_domain::ItemId;
use sqlx::Row;

use crate::catalogue::{RowLock, read_items};
use crate::items::item_id;
use crate::{Backend, Db, DbError};

mod sale;

pub use sale::{Sale, SaleSet};
pub(crate) use sale::{end_sale_in, return_held_in};

/// One item's inventory row as the row cache publishes it: column name -> value.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct InventoryRow {
    /// The item.
    pub item_id: ItemId,
    /// Its title, so a page can show the row without the database.
    pub title: String,
    /// Regular price in cents.
    pub price_cents: i64,
    /// Units left.
    pub stock: i64,
    /// Price during the sale, if one is set.
    pub sale_price_cents: Option<i64>,
    /// Sale start, unix seconds.
    pub sale_start: Option<i64>,
    /// Sale end (exclusive), unix seconds.
    pub sale_end: Option<i64>,
}

/// The SQL expression of an `inventory` row's units at the time bound to the
/// placeholder `now` (`$n`): after a sale's end, the units kept back for after
/// it count before they are given back (checkout and the cart page count them
/// alike).
pub(crate) fn units_at(now: &str) -> String {
    format!("stock + CASE WHEN sale_end IS NULL OR sale_end <= {now} THEN held_stock ELSE 0 END")
}

/// The most units an item's stock may hold: a count past it is a mistake (a
/// price typed in the stock field), refused before it is written.
pub const MAX_STOCK: i64 = 1_000_000_000;

/// A change of an item's units, as a warehouse makes it ([`Db::change_stock`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StockChange {
    /// Units received (negative: written off), added to what is left at the
    /// moment it is written, so orders placed meanwhile still count.
    Add(i64),
    /// A count: exactly this many units from now (orders placed since the count
    /// was taken are not subtracted).
    Set(i64),
}

/// What [`Db::change_stock`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StockChanged {
    /// The item has `after` units now, `before` just before.
    Changed {
        /// Units before.
        before: i64,
        /// Units now.
        after: i64,
    },
    /// There is no such item; nothing changed.
    NoSuchItem,
    /// The item is no longer sold; nothing changed.
    Retired,
    /// The item's flash sale has not ended (it ends at `end`, unix seconds): its
    /// units are the sale's, changed by starting the sale again; nothing changed.
    OnSale {
        /// When the sale ends.
        end: i64,
    },
    /// The change would leave fewer than 0 or more than [`MAX_STOCK`] units;
    /// nothing changed.
    OutOfRange {
        /// Units the item has.
        before: i64,
    },
}

/// The most ids one batch query names (well under SQLite's 32,766 parameters).
pub const ROWS_PER_QUERY: usize = 500;

/// What an inventory row is read with (a `WHERE` follows).
const INVENTORY_SELECT: &str = "SELECT i.id, i.title, i.price_cents, v.stock, v.sale_price_cents, \
     v.sale_start, v.sale_end FROM items i JOIN inventory v ON v.item_id = i.id";

/// The same rows as [`INVENTORY_SELECT`], built by SQLite as one text: a line per
/// row, its id, a space and its JSON object, byte for byte what serializing an
/// [`InventoryRow`] writes (a JSON object never holds a raw newline).
const SQLITE_JSON_SELECT: &str = "SELECT group_concat(i.id || ' ' || json_object('item_id', i.id, \
     'title', i.title, 'price_cents', i.price_cents, 'stock', v.stock, \
     'sale_price_cents', v.sale_price_cents, 'sale_start', v.sale_start, 'sale_end', v.sale_end), \
     char(10)) FROM items i JOIN inventory v ON v.item_id = i.id";

/// A line of [`SQLITE_JSON_SELECT`]'s text: the row's id and its JSON.
fn sqlite_json_line(line: &str) -> Result<(ItemId, &str), DbError> {
    let corrupt = || DbError::Corrupt { what: "items.id" };
    let (id, json) = line.split_once(' ').ok_or_else(corrupt)?;
    let id = id.parse::<i64>().map_err(|_| corrupt())?;
    Ok((ItemId::from_i64(id).map_err(|_| corrupt())?, json))
}

/// An inventory row from a row of [`INVENTORY_SELECT`].
fn inventory_from(row: &sqlx::any::AnyRow) -> Result<InventoryRow, DbError> {
    Ok(InventoryRow {
        item_id: item_id(row, "id", "items.id")?,
        title: row.try_get("title")?,
        price_cents: row.try_get("price_cents")?,
        stock: row.try_get("stock")?,
        sale_price_cents: row.try_get("sale_price_cents")?,
        sale_start: row.try_get("sale_start")?,
        sale_end: row.try_get("sale_end")?,
    })
}

/// What a cart page says of a line beside its price: how many units the item
/// has, and the end of its flash sale if one was set (a sale that runs or is
/// coming ends later than now: its units are the sale's, and checkout refuses
/// the line).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Availability {
    /// Units left.
    pub stock: i64,
    /// The end of the item's flash sale, unix seconds, if one was set.
    pub sale_end: Option<i64>,
}

impl Availability {
    /// Whether the item's flash sale runs or is coming at `now`.
    pub fn on_sale(&self, now: i64) -> bool {
        self.sale_end.is_some_and(|end| now < end)
    }
}

impl Db {
    /// The availability at `now` (unix seconds) of those of `ids` that have an
    /// inventory row, by id (a cart's lines: one query per [`ROWS_PER_QUERY`]
    /// ids). After a sale, the units kept back for after it count, as checkout
    /// counts them, before the sale-end step has given them back.
    pub async fn availability(
        &self,
        ids: &[ItemId],
        now: i64,
    ) -> Result<HashMap<ItemId, Availability>, DbError> {
        let sql = |n: usize| {
            format!(
                "SELECT item_id, {} AS stock, sale_end FROM inventory WHERE item_id IN ({})",
                units_at(&format!("${}", n + 1)),
                crate::items::placeholders(n)
            )
        };
        let mut found = HashMap::with_capacity(ids.len());
        for row in self.rows_for_ids(ids, sql, &[now]).await? {
            let availability = Availability {
                stock: row.try_get("stock")?,
                sale_end: row.try_get("sale_end")?,
            };
            found.insert(item_id(&row, "item_id", "inventory.item_id")?, availability);
        }
        Ok(found)
    }

    /// The rows `sql(n)` answers for `ids` on the read pool: one query per
    /// [`ROWS_PER_QUERY`] ids, `$1` to `$n` bound to a chunk's `n` ids, then
    /// the placeholders after them to `extra`.
    async fn rows_for_ids(
        &self,
        ids: &[ItemId],
        sql: impl Fn(usize) -> String,
        extra: &[i64],
    ) -> Result<Vec<sqlx::any::AnyRow>, DbError> {
        let mut rows = Vec::new();
        for chunk in ids.chunks(ROWS_PER_QUERY) {
            let sql = sql(chunk.len());
            let mut query = sqlx::query(&sql);
            for id in chunk {
                query = query.bind(id.to_i64());
            }
            for value in extra {
                query = query.bind(*value);
            }
            rows.extend(query.fetch_all(&self.read).await?);
        }
        Ok(rows)
    }

    /// The item's inventory row, or `None` if the item does not exist.
    pub async fn inventory_row(&self, id: ItemId) -> Result<Option<InventoryRow>, DbError> {
        let row = sqlx::query(&format!("{INVENTORY_SELECT} WHERE i.id = $1"))
            .bind(id.to_i64())
            .fetch_optional(&self.read)
            .await?;
        row.as_ref().map(inventory_from).transpose()
    }

    /// The inventory rows of `ids` that exist, as the JSON objects the row cache
    /// stores, by id: one query per [`ROWS_PER_QUERY`] ids (the row refresher's
    /// batch read; a query per row cost a round trip each). On SQLite the database
    /// writes the JSON, one text for the whole chunk (`SQLITE_JSON_SELECT`): each
    /// row passed, decoded and serialized here kept the refresher of 100,000 rows a
    /// second with ids scattered over the table behind (lag p99 180 ms, 45 ms so:
    /// BENCHMARKS.md, "scattered ids").
    pub async fn inventory_json_many(
        &self,
        ids: &[ItemId],
    ) -> Result<HashMap<ItemId, String>, DbError> {
        let select = match self.backend() {
            Backend::Sqlite => SQLITE_JSON_SELECT,
            Backend::Postgres => INVENTORY_SELECT,
        };
        let sql = |n: usize| format!("{select} WHERE i.id IN ({})", crate::items::placeholders(n));
        let rows = self.rows_for_ids(ids, sql, &[]).await?;
        let mut found = HashMap::with_capacity(ids.len());
        for row in rows {
            match self.backend() {
                Backend::Sqlite => {
                    let lines: Option<String> = row.try_get(0)?;
                    for line in lines.unwrap_or_default().lines() {
                        let (id, json) = sqlite_json_line(line)?;
                        found.insert(id, json.to_owned());
                    }
                }
                Backend::Postgres => {
                    let row = inventory_from(&row)?;
                    let json =
                        serde_json::to_string(&row).expect("an inventory row always serializes");
                    found.insert(row.item_id, json);
                }
            }
        }
        Ok(found)
    }

    /// The row as the JSON object the row cache stores.
    pub async fn inventory_json(&self, id: ItemId) -> Result<Option<String>, DbError> {
        Ok(self
            .inventory_row(id)
            .await?
            .map(|row| serde_json::to_string(&row).expect("an inventory row always serializes")))
    }

    /// Sets the stock of an item (nothing kept back for after a sale). `false`
    /// if there is no such item.
    pub async fn set_stock(&self, id: ItemId, stock: i64) -> Result<bool, DbError> {
        let mut tx = self.begin_write().await?;
        let done =
            sqlx::query("UPDATE inventory SET stock = $1, held_stock = 0 WHERE item_id = $2")
                .bind(stock)
                .bind(id.to_i64())
                .execute(&mut *tx)
                .await?;
        tx.commit().await?;
        Ok(done.rows_affected() == 1)
    }

    /// Changes an item's units (see [`StockChange`]), unless its flash sale has
    /// not ended by `now` (the sale's units are the sale's to change), it is
    /// retired, or the result is out of range: see [`StockChanged`]. The item's
    /// row is held until the commit, so a checkout waits for it and a count is
    /// exact.
    pub async fn change_stock(
        &self,
        id: ItemId,
        change: StockChange,
        now: i64,
    ) -> Result<StockChanged, DbError> {
        let mut tx = self.begin_write().await?;
        let item = read_items(&mut tx, &[id], RowLock::Share)
            .await?
            .remove(&id);
        let lock = match tx.backend() {
            Backend::Sqlite => "",
            Backend::Postgres => " FOR UPDATE",
        };
        // A count after a sale counts the units kept back for after it.
        return_held_in(&mut tx, id, now).await?;
        let row = sqlx::query(&format!(
            "SELECT stock, sale_end FROM inventory WHERE item_id = $1{lock}"
        ))
        .bind(id.to_i64())
        .fetch_optional(&mut *tx)
        .await?;
        let answer = match (item, &row) {
            (None, _) | (_, None) => StockChanged::NoSuchItem,
            (Some(item), _) if item.retired => StockChanged::Retired,
            (_, Some(row)) => {
                let (before, end): (i64, Option<i64>) =
                    (row.try_get("stock")?, row.try_get("sale_end")?);
                let after = match change {
                    StockChange::Add(units) => before.checked_add(units),
                    StockChange::Set(units) => Some(units),
                };
                match (end, after) {
                    (Some(end), _) if end > now => StockChanged::OnSale { end },
                    (_, Some(after)) if (0..=MAX_STOCK).contains(&after) => {
                        StockChanged::Changed { before, after }
                    }
                    _ => StockChanged::OutOfRange { before },
                }
            }
        };
        let StockChanged::Changed { after, .. } = answer else {
            tx.rollback().await?;
            return Ok(answer);
        };
        sqlx::query("UPDATE inventory SET stock = $1 WHERE item_id = $2")
            .bind(after)
            .bind(id.to_i64())
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(answer)
    }
}
