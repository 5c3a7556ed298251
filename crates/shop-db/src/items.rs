//! The catalogue.

use std::collections::{HashMap, HashSet};

use serde::Serialize;
use shop_domain::ItemId;
use shop_domain::cart_version::{CartVersion, ShownLine};
use sqlx::Row;
use sqlx::any::AnyRow;

use crate::{Db, DbError};

/// The item id in `row`'s `column`; one that is no item id is
/// [`DbError::Corrupt`], naming `what` (the table and column).
pub(crate) fn item_id(row: &AnyRow, column: &str, what: &'static str) -> Result<ItemId, DbError> {
    ItemId::from_i64(row.try_get(column)?).map_err(|_| DbError::Corrupt { what })
}

/// Most ids bound into one `IN (...)` list. SQLite allows 32,766 parameters per
/// statement (999 before 3.32) and PostgreSQL 65,535; 500 stays far below both and
/// keeps each statement's plan and result small.
pub(crate) const IN_LIST_CHUNK: usize = 500;

/// `$1, $2, ..., $n`: the placeholders of an `IN (...)` list of `n` values.
pub(crate) fn placeholders(n: usize) -> String {
    let mut out = String::with_capacity(n * 5);
    for i in 1..=n {
        if i > 1 {
            out.push_str(", ");
        }
        out.push('$');
        out.push_str(&i.to_string());
    }
    out
}

/// One catalogue item.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Item {
    /// Its id.
    pub id: ItemId,
    /// Short name.
    pub title: String,
    /// Longer text for the item page.
    pub description: String,
    /// Regular price in cents.
    pub price_cents: i64,
    /// Department.
    pub category: String,
    /// No longer sold (kept for the orders that name it): its page answers 410,
    /// and it is in no listing, search or ranking.
    pub retired: bool,
    /// Bumped by each change to it (1 when added): an edit made from an older
    /// copy names an older version and is refused.
    pub version: i64,
}

impl Item {
    /// A cart line of `quantity` of this item as a cart page shows it: at its
    /// price now, or as no longer sold (no price, not counted).
    pub fn shown_line(&self, quantity: u32) -> ShownLine {
        ShownLine {
            item: self.id,
            quantity,
            price_cents: (!self.retired).then_some(self.price_cents),
        }
    }
}

/// `SELECT` of the items whose ids are the `n` placeholders, then `suffix` (a
/// row lock, or nothing).
pub(crate) fn items_in(n: usize, suffix: &str) -> String {
    format!(
        "SELECT {ITEM_COLUMNS} FROM items WHERE id IN ({}){suffix}",
        placeholders(n)
    )
}

/// The columns [`Item::from_row`] reads, for `SELECT` lists.
pub(crate) const ITEM_COLUMNS: &str =
    "id, title, description, price_cents, category, retired_at, version";

impl Item {
    pub(crate) fn from_row(row: &AnyRow) -> Result<Self, DbError> {
        Ok(Self {
            id: item_id(row, "id", "items.id")?,
            title: row.try_get("title")?,
            description: row.try_get("description")?,
            price_cents: row.try_get("price_cents")?,
            category: row.try_get("category")?,
            retired: row.try_get::<Option<i64>, _>("retired_at")?.is_some(),
            version: row.try_get("version")?,
        })
    }

    /// Its four editable fields.
    pub fn fields(&self) -> shop_domain::catalogue::ItemFields {
        shop_domain::catalogue::ItemFields {
            title: self.title.clone(),
            description: self.description.clone(),
            price_cents: self.price_cents,
            category: self.category.clone(),
        }
    }
}

impl Db {
    /// The item (retired or not), or `None` if there is no such item.
    pub async fn item(&self, id: ItemId) -> Result<Option<Item>, DbError> {
        let row = sqlx::query(&format!("SELECT {ITEM_COLUMNS} FROM items WHERE id = $1"))
            .bind(id.to_i64())
            .fetch_optional(&self.read)
            .await?;
        row.as_ref().map(Item::from_row).transpose()
    }

    /// The items (retired or not) with these ids that exist, in the order asked for (an id asked
    /// for twice is answered twice). Any number of ids: they are looked up
    /// `IN_LIST_CHUNK` at a time, each distinct id once.
    pub async fn items(&self, ids: &[ItemId]) -> Result<Vec<Item>, DbError> {
        let found = self.items_by_id(ids).await?;
        Ok(ids.iter().filter_map(|id| found.get(id).cloned()).collect())
    }

    /// The version of a cart of `lines` at the prices the database holds now (what
    /// a cart page showing them shows); a line of an item that does not exist is
    /// left out, as the page leaves it out.
    pub async fn cart_version(&self, lines: &[(ItemId, u32)]) -> Result<CartVersion, DbError> {
        let ids: Vec<ItemId> = lines.iter().map(|&(id, _)| id).collect();
        let items = self.items_by_id(&ids).await?;
        Ok(CartVersion::new(
            lines
                .iter()
                .filter_map(|&(id, quantity)| Some(items.get(&id)?.shown_line(quantity)))
                .collect(),
        ))
    }

    /// The items (retired or not) with these ids that exist, by id (for joining them to other
    /// data by id), read in chunks of `IN_LIST_CHUNK` ids.
    pub async fn items_by_id(&self, ids: &[ItemId]) -> Result<HashMap<ItemId, Item>, DbError> {
        let mut seen = HashSet::with_capacity(ids.len());
        let distinct: Vec<i64> = ids
            .iter()
            .filter(|id| seen.insert(**id))
            .map(|id| id.to_i64())
            .collect();
        let mut found = HashMap::with_capacity(distinct.len());
        for chunk in distinct.chunks(IN_LIST_CHUNK) {
            let sql = items_in(chunk.len(), "");
            let mut q = sqlx::query(&sql);
            for id in chunk {
                q = q.bind(*id);
            }
            for row in q.fetch_all(&self.read).await? {
                let item = Item::from_row(&row)?;
                found.insert(item.id, item);
            }
        }
        Ok(found)
    }

    /// How many items the catalogue holds (retired ones too).
    pub async fn item_count(&self) -> Result<u64, DbError> {
        let n: i64 = sqlx::query("SELECT COUNT(*) AS n FROM items")
            .fetch_one(&self.read)
            .await?
            .try_get("n")?;
        Ok(n as u64)
    }
}

/// Catalogue browsing: the departments, and the items page by page in id order.
///
/// Pages are keyset pages: a page is asked for by the last id of the one before
/// (`after`), so page 1,000 reads the same few index entries as page 1, where
/// `OFFSET` would read and throw away every row before it.
impl Db {
    /// The departments with at least one live item, in name order. A loose index scan (one index probe per
    /// department, not a read of every item), written as a recursive query both
    /// databases run.
    pub async fn categories(&self) -> Result<Vec<String>, DbError> {
        let rows = sqlx::query(
            "WITH RECURSIVE c (name) AS ( \
                 SELECT MIN(category) FROM items WHERE retired_at IS NULL \
                 UNION ALL \
                 SELECT (SELECT MIN(category) FROM items \
                         WHERE category > c.name AND retired_at IS NULL) \
                 FROM c WHERE c.name IS NOT NULL \
             ) SELECT name FROM c WHERE name IS NOT NULL",
        )
        .fetch_all(&self.read)
        .await?;
        rows.iter()
            .map(|row| Ok(row.try_get::<String, _>("name")?))
            .collect()
    }

    /// The items that end a page of `page` items of the listing (of `category`,
    /// or the whole catalogue), in id order: the 24th, the 48th, ... live item.
    /// The "next" links only ever point at these, so only the listing pages after
    /// them are worth keeping; any other `after` (a crawler's made-up one) is
    /// answered but not cached. One pass over the listing's index: the caller keeps
    /// the answer (see `shop_web::listing_ends`), so telling a page end costs a
    /// binary search, whatever the page's position.
    pub async fn page_ends(
        &self,
        category: Option<&str>,
        page: u32,
    ) -> Result<Vec<ItemId>, DbError> {
        let page = i64::from(page.max(1));
        let ids: Vec<i64> = match category {
            Some(category) => {
                sqlx::query_scalar(
                    "SELECT id FROM (SELECT id, ROW_NUMBER() OVER (ORDER BY id) AS n \
                     FROM items WHERE category = $1 AND retired_at IS NULL) AS listed \
                     WHERE n % $2 = 0 ORDER BY id",
                )
                .bind(category)
                .bind(page)
                .fetch_all(&self.read)
                .await?
            }
            None => {
                sqlx::query_scalar(
                    "SELECT id FROM (SELECT id, ROW_NUMBER() OVER (ORDER BY id) AS n \
                     FROM items WHERE retired_at IS NULL) AS listed \
                     WHERE n % $1 = 0 ORDER BY id",
                )
                .bind(page)
                .fetch_all(&self.read)
                .await?
            }
        };
        ids.into_iter()
            .map(|id| ItemId::from_i64(id).map_err(|_| DbError::Corrupt { what: "items.id" }))
            .collect()
    }

    /// Up to `limit` live items in id order with ids above `after` (from the first
    /// when `None`), of one department when `category` is given.
    pub async fn items_page(
        &self,
        category: Option<&str>,
        after: Option<ItemId>,
        limit: u32,
    ) -> Result<Vec<Item>, DbError> {
        let after = after.map_or(0, ItemId::to_i64);
        let rows = match category {
            Some(category) => {
                sqlx::query(&format!(
                    "SELECT {ITEM_COLUMNS} FROM items \
                     WHERE category = $1 AND id > $2 AND retired_at IS NULL ORDER BY id LIMIT $3"
                ))
                .bind(category)
                .bind(after)
                .bind(i64::from(limit))
                .fetch_all(&self.read)
                .await?
            }
            None => {
                sqlx::query(&format!(
                    "SELECT {ITEM_COLUMNS} FROM items \
                     WHERE id > $1 AND retired_at IS NULL ORDER BY id LIMIT $2"
                ))
                .bind(after)
                .bind(i64::from(limit))
                .fetch_all(&self.read)
                .await?
            }
        };
        rows.iter().map(Item::from_row).collect()
    }
}
