//! Starting a flash sale: the database row changes, the row cache starts refreshing
//! its copy often (so the sale page shows live stock without querying the
//! database), and the cached sale page is dropped so it lists the new item at once.

use shop_cache::domain::ItemId;
use shop_cache::page_cache::{PageRequest, PageStore};
use shop_cache::row_cache::RowCache;
use shop_db::Db;
use shop_db::inventory::Sale;

/// How often a sale item's cached row is refreshed by default, in seconds.
pub const DEFAULT_REFRESH: f64 = 1.0;

/// Puts `item` on sale, caches its row every `refresh` seconds and drops the cached
/// sale page. `false` if there is no such item (nothing changed then).
pub async fn start(
    db: &Db,
    rows: &RowCache,
    pages: &PageStore,
    item: ItemId,
    sale: Sale,
    refresh: f64,
) -> anyhow::Result<bool> {
    if !db.set_sale(item, sale).await? {
        return Ok(false);
    }
    rows.schedule(item, refresh).await?;
    pages
        .remove(&PageRequest::new(shop_web::flash::SHELL_PATH, None).key())
        .await?;
    Ok(true)
}
