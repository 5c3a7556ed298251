//! The catalogue.

use serde::Serialize;
use shop_domain::ItemId;
use sqlx::Row;
use sqlx::any::AnyRow;

use crate::{Db, DbError};

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
}

impl Item {
    fn from_row(row: &AnyRow) -> Result<Self, DbError> {
        Ok(Self {
            id: ItemId::from_i64(row.try_get("id")?)
                .map_err(|_| DbError::Corrupt { what: "items.id" })?,
            title: row.try_get("title")?,
            description: row.try_get("description")?,
            price_cents: row.try_get("price_cents")?,
            category: row.try_get("category")?,
        })
    }
}

impl Db {
    /// The item, or `None` if there is no such item.
    pub async fn item(&self, id: ItemId) -> Result<Option<Item>, DbError> {
        let row = sqlx::query(
            "SELECT id, title, description, price_cents, category FROM items WHERE id = $1",
        )
        .bind(id.to_i64())
        .fetch_optional(&self.pool)
        .await?;
        row.as_ref().map(Item::from_row).transpose()
    }

    /// The items with these ids that exist, in the order asked for.
    pub async fn items(&self, ids: &[ItemId]) -> Result<Vec<Item>, DbError> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let placeholders: Vec<String> = (1..=ids.len()).map(|i| format!("${i}")).collect();
        let sql = format!(
            "SELECT id, title, description, price_cents, category FROM items WHERE id IN ({})",
            placeholders.join(", ")
        );
        let mut q = sqlx::query(&sql);
        for id in ids {
            q = q.bind(id.to_i64());
        }
        let found: Vec<Item> = q
            .fetch_all(&self.pool)
            .await?
            .iter()
            .map(Item::from_row)
            .collect::<Result<_, _>>()?;
        Ok(ids
            .iter()
            .filter_map(|id| found.iter().find(|it| it.id == *id).cloned())
            .collect())
    }

    /// How many items the catalogue holds.
    pub async fn item_count(&self) -> Result<u64, DbError> {
        let n: i64 = sqlx::query("SELECT COUNT(*) AS n FROM items")
            .fetch_one(&self.pool)
            .await?
            .try_get("n")?;
        Ok(n as u64)
    }
}
