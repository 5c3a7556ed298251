//! The database as the row cache's source: what the refresher copies into
//! `inv:<id>`.

use shop_cache::domain::ItemId;
use shop_cache::row_cache::{RowSource, SourceError};
use shop_db::Db;

/// The row refresher's source: an item's inventory row as JSON, from `db`.
pub fn row_source(db: Db) -> impl RowSource + 'static {
    move |row: ItemId| {
        let db = db.clone();
        async move {
            db.inventory_json(row)
                .await
                .map_err(|e| Box::new(e) as SourceError)
        }
    }
}
