//! The database as the row cache's source: what the refresher copies into
//! `inv:<id>`, a batch of rows in one query.

use std::collections::HashMap;

use shop_cache::domain::ItemId;
use shop_cache::row_cache::{RowSource, SourceError};
use shop_db::Db;

/// The row refresher's source: items' inventory rows as JSON, from the database.
#[derive(Clone)]
pub struct DbRows(pub Db);

impl RowSource for DbRows {
    async fn load(&self, row: ItemId) -> Result<Option<String>, SourceError> {
        self.0
            .inventory_json(row)
            .await
            .map_err(|e| Box::new(e) as SourceError)
    }

    async fn load_many(&self, rows: &[ItemId]) -> Result<HashMap<ItemId, String>, SourceError> {
        self.0
            .inventory_json_many(rows)
            .await
            .map_err(|e| Box::new(e) as SourceError)
    }
}

/// The row refresher's source over `db`.
pub fn row_source(db: Db) -> DbRows {
    DbRows(db)
}
