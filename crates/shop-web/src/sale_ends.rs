//! The cached pages of an item whose flash sale has just ended are purged at its
//! end: while the sale ran, its item page said "On flash sale ... until" and hid
//! "Add to cart", and the page cache would serve that page for its whole TTL
//! after the end (the page's script shows the form again, a page read without
//! scripts did not).
//!
//! Each web process reads the sales for its sale pages already (the
//! [`Board`] its `SaleWatcher` keeps, every 200 ms); [`SaleEnds`] follows that
//! board and purges, once per sale end, the item's page and the sale page (which
//! lists the sales on now). Every web process does it: a few purges per sale's
//! end, each of which changes nothing but the pages' freshness. A render that
//! began before the purge is not stored (the page cache's own rule), so no page
//! of the sale outlives its end by more than this daemon's step.
//!
//! The same step gives the units an item had beyond its sale's, kept back
//! while the sale ran, back to its stock ([`shop_db::Db::return_held_stock`]:
//! one write for every sale ended, whichever process makes it first) and purges
//! those items' pages too (they say whether the item is in stock).

use std::collections::HashMap;
use std::time::Duration;

use shop_app::page_tags;
use shop_cache::CacheError;
use shop_cache::daemon::Daemon;
use shop_cache::domain::ItemId;
use shop_cache::flash_sale::Board;
use shop_page_cache::PageStore;
use tokio::sync::watch;

/// How often the board is looked at for sales that ended.
pub const STEP: Duration = Duration::from_millis(500);

/// Purges the pages of sales that ended; see the module documentation.
pub struct SaleEnds {
    board: watch::Receiver<Board>,
    pages: PageStore,
    db: shop_db::Db,
    /// The end each item's pages were last purged for.
    purged: HashMap<ItemId, i64>,
}

impl SaleEnds {
    /// Follows `board`, purging in `pages`, giving stock back in `db`.
    pub fn new(board: watch::Receiver<Board>, pages: PageStore, db: shop_db::Db) -> Self {
        Self {
            board,
            pages,
            db,
            purged: HashMap::new(),
        }
    }

    /// Gives back the units kept for after every sale ended by `now` (unix
    /// seconds), then purges the pages of those items and of every sale on the
    /// board that has ended by `now` and whose end this process has not purged
    /// for yet. Returns how many items' pages it purged. A purge or a write
    /// that fails is tried again at the next step.
    pub async fn step(&mut self, now: i64) -> Result<usize, CacheError> {
        // The units first, then the purges: a page drawn after the purge shows
        // them. A database that cannot answer now holds back no purge.
        let returned = self.db.return_held_stock(now).await;
        let purged = self
            .purge_ended(now, returned.as_deref().unwrap_or_default())
            .await?;
        returned.map_err(|error| CacheError::Source {
            what: "the database (stock kept for after a sale)",
            source: Box::new(error),
        })?;
        Ok(purged)
    }

    /// The purges of [`SaleEnds::step`]: the pages of the sales on the board
    /// that ended and were not purged for yet, and of the items whose units
    /// were `returned` (most often the same); how many items' pages.
    async fn purge_ended(&mut self, now: i64, returned: &[ItemId]) -> Result<usize, CacheError> {
        let board = self.board.borrow().clone();
        let ended: Vec<(ItemId, i64)> = board
            .values()
            .filter(|sale| sale.end <= now && self.purged.get(&sale.item_id) != Some(&sale.end))
            .map(|sale| (sale.item_id, sale.end))
            .collect();
        // Only items still on the board are remembered: the map is as bounded
        // as the board.
        self.purged.retain(|item, _| board.contains_key(item));
        let mut items: Vec<ItemId> = ended.iter().map(|(item, _)| *item).collect();
        let more: Vec<ItemId> = returned
            .iter()
            .filter(|item| !items.contains(item))
            .copied()
            .collect();
        items.extend(more);
        if items.is_empty() {
            return Ok(0);
        }
        let mut tags: Vec<_> = items.iter().map(|item| page_tags::item(*item)).collect();
        tags.push(page_tags::sales());
        self.pages.purge(&tags).await?;
        self.purged.extend(ended.iter().copied());
        Ok(items.len())
    }
}

impl Daemon for SaleEnds {
    const NAME: &'static str = "sale ends";
    type Error = CacheError;

    async fn tick(&mut self) -> Result<Duration, CacheError> {
        self.step(shop_db::unix_now()).await?;
        Ok(STEP)
    }
}
