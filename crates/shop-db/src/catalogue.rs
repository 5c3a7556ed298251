//! Changes to the catalogue: add an item, edit its fields, retire it, import many.
//!
//! Every change is one [`crate::WriteTx`] that reads the item as it was and writes
//! it as it becomes, and answers both ([`ItemChange`]), so the caller (the
//! application layer) can tell what changed and purge exactly the cached pages
//! that showed it, after the commit. An item is never deleted: retiring it sets
//! `retired_at`, and old orders still name it.
//!
//! Field rules are [`shop_domain::catalogue`]'s; what reaches here is checked.

use std::collections::HashMap;

use shop_domain::ItemId;
use shop_domain::catalogue::{ItemEdit, ItemFields};
use sqlx::Row;

use crate::items::{IN_LIST_CHUNK, Item, items_in};
use crate::write::WriteTx;
use crate::{Backend, Db, DbError};

/// One item before and after a change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ItemChange {
    /// As it was; `None` for an item just added.
    pub before: Option<Item>,
    /// As it is now.
    pub after: Item,
}

impl ItemChange {
    /// False when the write left the item as it was.
    pub fn changed(&self) -> bool {
        self.before.as_ref() != Some(&self.after)
    }
}

/// The answer to [`Db::update_item`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EditOutcome {
    /// The edit is applied (or changed nothing: the change says so).
    Applied(ItemChange),
    /// There is no such item; nothing was written.
    NoSuchItem,
    /// The item changed since the version the edit was made from; nothing was
    /// written.
    Stale {
        /// The item as it is now.
        current: Item,
    },
    /// The edit would put the item's regular price below the price of its
    /// flash sale, which has not ended (the sale would charge more than the
    /// item costs); nothing was written.
    BelowSale {
        /// The sale's price, in cents.
        sale_cents: i64,
        /// When the sale ends, unix seconds.
        end: i64,
    },
}

/// The answer to [`Db::add_item`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AddOutcome {
    /// The new item.
    Added(Item),
    /// The id asked for is another item's; nothing was written.
    IdTaken(ItemId),
    /// No id was asked for, and every id is taken (retired items' count).
    /// Nothing was written.
    NoIdLeft,
}

/// The lowest id no item has (retired ones count): 1, or the one after the
/// lowest id whose next is free.
const LOWEST_FREE_ID: &str = "SELECT CASE WHEN NOT EXISTS (SELECT 1 FROM items WHERE id = 1) \
     THEN 1 ELSE (SELECT MIN(i.id) + 1 FROM items i \
     WHERE NOT EXISTS (SELECT 1 FROM items j WHERE j.id = i.id + 1)) END AS id";

/// How many times an add without an id retries when a concurrent add (on
/// PostgreSQL) took the id it picked.
const ADD_RETRIES: u32 = 5;

impl Db {
    /// Adds an item with `stock` units in stock, under `id` or, without one, the
    /// next id after the highest (once the largest id is taken, the lowest free
    /// one).
    pub async fn add_item(
        &self,
        id: Option<ItemId>,
        fields: &ItemFields,
        stock: i64,
    ) -> Result<AddOutcome, DbError> {
        let mut tries = 0;
        loop {
            let mut tx = self.begin_write().await?;
            let id = match id {
                Some(id) => {
                    if lock_one(&mut tx, id).await?.is_some() {
                        tx.rollback().await?;
                        return Ok(AddOutcome::IdTaken(id));
                    }
                    id.to_i64()
                }
                None => {
                    let highest: i64 = sqlx::query("SELECT COALESCE(MAX(id), 0) AS id FROM items")
                        .fetch_one(&mut *tx)
                        .await?
                        .try_get("id")?;
                    let next = if highest < ItemId::MAX as i64 {
                        highest + 1
                    } else {
                        // One item given the largest id (a typo in an import)
                        // must not leave every later add without an id: the
                        // lowest free one then.
                        sqlx::query(LOWEST_FREE_ID)
                            .fetch_one(&mut *tx)
                            .await?
                            .try_get("id")?
                    };
                    if next > ItemId::MAX as i64 {
                        tx.rollback().await?;
                        return Ok(AddOutcome::NoIdLeft);
                    }
                    next
                }
            };
            match insert(&mut tx, id, fields, stock).await {
                Ok(item) => {
                    tx.commit().await?;
                    return Ok(AddOutcome::Added(item));
                }
                // Two adds without an id picked the same one (PostgreSQL runs them
                // side by side; SQLite's one writer never does): pick again.
                Err(DbError::Sqlx(sqlx::Error::Database(e)))
                    if e.is_unique_violation() && tries < ADD_RETRIES =>
                {
                    tries += 1;
                    drop(tx);
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Applies `edit` to item `id` (retired or not), if the item is still at
    /// `if_version` when one is given (checked under the row's lock, so of two
    /// edits from the same version one is refused); without one, the later edit
    /// wins. Nothing changes unless the answer is [`EditOutcome::Applied`].
    pub async fn update_item(
        &self,
        id: ItemId,
        edit: &ItemEdit,
        if_version: Option<i64>,
    ) -> Result<EditOutcome, DbError> {
        let mut tx = self.begin_write().await?;
        let Some(before) = lock_one(&mut tx, id).await? else {
            tx.rollback().await?;
            return Ok(EditOutcome::NoSuchItem);
        };
        if if_version.is_some_and(|v| v != before.version) {
            tx.rollback().await?;
            return Ok(EditOutcome::Stale { current: before });
        }
        let fields = edit.apply(&before.fields());
        let mut after = Item {
            id,
            title: fields.title,
            description: fields.description,
            price_cents: fields.price_cents,
            category: fields.category,
            ..before.clone()
        };
        if after.price_cents < before.price_cents
            && let Some((sale_cents, end)) = sale_above(&mut tx, id, after.price_cents).await?
        {
            tx.rollback().await?;
            return Ok(EditOutcome::BelowSale { sale_cents, end });
        }
        if after != before {
            after.version += 1;
            write_fields(&mut tx, &after, None).await?;
        }
        tx.commit().await?;
        Ok(EditOutcome::Applied(ItemChange {
            before: Some(before),
            after,
        }))
    }

    /// Retires item `id` at `now` (unix seconds), ending any sale of it: `None` if
    /// there is no such item; an item already retired is left as it is (the change
    /// says so).
    pub async fn retire_item(&self, id: ItemId, now: i64) -> Result<Option<ItemChange>, DbError> {
        let mut tx = self.begin_write().await?;
        let Some(before) = lock_one(&mut tx, id).await? else {
            tx.rollback().await?;
            return Ok(None);
        };
        if !before.retired {
            sqlx::query("UPDATE items SET retired_at = $1, version = version + 1 WHERE id = $2")
                .bind(now)
                .bind(id.to_i64())
                .execute(&mut *tx)
                .await?;
            // No longer sold: a sale of it running or coming ends now too (the
            // database-decided buy reads this window).
            crate::inventory::end_sale_in(&mut tx, id, now).await?;
        }
        tx.commit().await?;
        let after = Item {
            retired: true,
            version: before.version + i64::from(!before.retired),
            ..before.clone()
        };
        Ok(Some(ItemChange {
            before: Some(before),
            after,
        }))
    }

    /// Writes one chunk of an import (upsert by id, at most a few hundred lines,
    /// ids distinct) in one transaction: a new id is added with its `stock`, an
    /// existing item takes the line's fields, an item the line leaves as it is
    /// is not written. A retired item is left as it is, retired
    /// ([`Imported::kept_retired`]), unless `retired` is
    /// [`RetiredInImport::SellAgain`]: then it takes the line's fields and is
    /// sold again. A retailer's daily feed still listing an item an admin
    /// retired (a recall, a wrong price) must not put it back on sale unasked.
    pub async fn import_items(
        &self,
        lines: &[(ItemId, ItemFields, i64)],
        retired: RetiredInImport,
    ) -> Result<Imported, DbError> {
        let ids: Vec<ItemId> = lines.iter().map(|(id, _, _)| *id).collect();
        let mut tx = self.begin_write().await?;
        let mut existing = read_items(&mut tx, &ids, RowLock::Update).await?;
        let mut changes = Vec::new();
        let mut kept_retired = Vec::new();
        for (id, fields, stock) in lines {
            match existing.remove(id) {
                None => {
                    let after = insert(&mut tx, id.to_i64(), fields, *stock).await?;
                    changes.push(ItemChange {
                        before: None,
                        after,
                    });
                }
                Some(before) if before.retired && retired == RetiredInImport::Keep => {
                    kept_retired.push(*id);
                }
                Some(before) => {
                    let mut after = Item {
                        id: *id,
                        title: fields.title.clone(),
                        description: fields.description.clone(),
                        price_cents: fields.price_cents,
                        category: fields.category.clone(),
                        retired: false,
                        version: before.version,
                    };
                    if after != before {
                        after.version += 1;
                        write_fields(&mut tx, &after, Some(before.retired)).await?;
                        changes.push(ItemChange {
                            before: Some(before),
                            after,
                        });
                    }
                }
            }
        }
        tx.commit().await?;
        Ok(Imported {
            changes,
            kept_retired,
        })
    }
}

/// What an import does with a line naming a retired item.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RetiredInImport {
    /// Leave it retired and as it is (the default of `shop items import`).
    Keep,
    /// Take the line's fields and sell it again (`--sell-retired`).
    SellAgain,
}

/// What [`Db::import_items`] did with a chunk.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Imported {
    /// The items added or changed; the chunk's other lines changed nothing.
    pub changes: Vec<ItemChange>,
    /// The retired items left retired (named by lines, not written).
    pub kept_retired: Vec<ItemId>,
}

/// The price and end of item `id`'s flash sale, if one has not ended and its
/// price is above `price_cents`.
async fn sale_above(
    tx: &mut WriteTx,
    id: ItemId,
    price_cents: i64,
) -> Result<Option<(i64, i64)>, DbError> {
    let row = sqlx::query(
        "SELECT sale_price_cents, sale_end FROM inventory \
         WHERE item_id = $1 AND sale_end > $2 AND sale_price_cents > $3",
    )
    .bind(id.to_i64())
    .bind(crate::unix_now())
    .bind(price_cents)
    .fetch_optional(&mut **tx)
    .await?;
    row.map(|row| Ok((row.try_get("sale_price_cents")?, row.try_get("sale_end")?)))
        .transpose()
}

/// Item `id` as the transaction sees it, locked for a change.
async fn lock_one(tx: &mut WriteTx, id: ItemId) -> Result<Option<Item>, DbError> {
    Ok(read_items(tx, &[id], RowLock::Update).await?.remove(&id))
}

/// How the rows [`read_items`] reads are held until the transaction ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RowLock {
    /// Others may read them (a checkout: the price it charges cannot change under it).
    Share,
    /// Nobody else may lock them (a change: two edits of one item one after the other).
    Update,
}

/// The items among `ids` that exist, read inside the transaction and held as
/// `lock` says until it ends. (On SQLite the transaction already holds the one
/// write lock; PostgreSQL locks the rows.)
pub(crate) async fn read_items(
    tx: &mut WriteTx,
    ids: &[ItemId],
    lock: RowLock,
) -> Result<HashMap<ItemId, Item>, DbError> {
    let suffix = match (tx.backend(), lock) {
        (Backend::Sqlite, _) => "",
        (Backend::Postgres, RowLock::Share) => " FOR SHARE",
        (Backend::Postgres, RowLock::Update) => " FOR UPDATE",
    };
    let mut found = HashMap::with_capacity(ids.len());
    for chunk in ids.chunks(IN_LIST_CHUNK) {
        let sql = items_in(chunk.len(), suffix);
        let mut q = sqlx::query(&sql);
        for id in chunk {
            q = q.bind(id.to_i64());
        }
        for row in q.fetch_all(&mut **tx).await? {
            let item = Item::from_row(&row)?;
            found.insert(item.id, item);
        }
    }
    Ok(found)
}

async fn insert(
    tx: &mut WriteTx,
    id: i64,
    fields: &ItemFields,
    stock: i64,
) -> Result<Item, DbError> {
    sqlx::query(
        "INSERT INTO items (id, title, description, price_cents, category) \
         VALUES ($1, $2, $3, $4, $5)",
    )
    .bind(id)
    .bind(fields.title.as_str())
    .bind(fields.description.as_str())
    .bind(fields.price_cents)
    .bind(fields.category.as_str())
    .execute(&mut **tx)
    .await?;
    sqlx::query("INSERT INTO inventory (item_id, stock) VALUES ($1, $2)")
        .bind(id)
        .bind(stock.max(0))
        .execute(&mut **tx)
        .await?;
    Ok(Item {
        id: ItemId::from_i64(id).map_err(|_| DbError::Corrupt { what: "items.id" })?,
        title: fields.title.clone(),
        description: fields.description.clone(),
        price_cents: fields.price_cents,
        category: fields.category.clone(),
        retired: false,
        version: 1,
    })
}

/// Writes `item`'s fields and version; with `revive` (the item was retired),
/// sells it again.
async fn write_fields(tx: &mut WriteTx, item: &Item, revive: Option<bool>) -> Result<(), DbError> {
    let sql = if revive == Some(true) {
        "UPDATE items SET title = $1, description = $2, price_cents = $3, category = $4, \
         version = $5, retired_at = NULL WHERE id = $6"
    } else {
        "UPDATE items SET title = $1, description = $2, price_cents = $3, category = $4, \
         version = $5 WHERE id = $6"
    };
    sqlx::query(sql)
        .bind(item.title.as_str())
        .bind(item.description.as_str())
        .bind(item.price_cents)
        .bind(item.category.as_str())
        .bind(item.version)
        .bind(item.id.to_i64())
        .execute(&mut **tx)
        .await?;
    Ok(())
}
