//! Search results kept in this web server's memory, so a popular search costs no
//! database read: keyed by the normalised words (what [`SearchWords`] makes of
//! the text: "Lamp!" and "lamp" are one entry) and the page. Only a process with
//! an in-process page tier keeps them, since its feed is what hears the other
//! processes' purges.
//! Bounded to [`MAX_BYTES`], purged on every catalogue change and kept [`TTL`] at
//! most, as every [`PurgedCopy`] is.

use std::sync::Arc;
use std::time::Duration;

use shop_db::items::Item;
use shop_db::search::SearchWords;
use shop_page_cache::PageStore;

use crate::page_cache::PageTier;
use crate::purged_copy::{Mark, PurgedCopy, item_bytes};

/// The most bytes of searches and results kept.
pub const MAX_BYTES: u64 = 16 << 20;
/// The longest an entry is kept (a backstop: purges end it sooner).
pub const TTL: Duration = Duration::from_secs(300);

/// The cache; see the module documentation.
pub struct SearchCache(PurgedCopy<(String, u32), Vec<Item>>);

impl SearchCache {
    /// Results of `store`'s process, purged through `tier`'s feed.
    pub fn new(store: &PageStore, tier: Arc<PageTier>) -> Self {
        Self(PurgedCopy::new(
            store,
            tier,
            MAX_BYTES,
            TTL,
            |(words, _), items| 64 + words.len() + items.iter().map(item_bytes).sum::<usize>(),
        ))
    }

    /// The results of `words`' page `page`, if kept and still good.
    pub fn get(&self, words: &SearchWords, page: u32) -> Option<Arc<Vec<Item>>> {
        self.0.get(&(words.joined(), page))
    }

    /// Read before the database is.
    pub fn mark(&self) -> Mark {
        self.0.mark()
    }

    /// Keeps `items`, read after `mark`, unless a purge came since.
    pub fn put(&self, words: &SearchWords, page: u32, items: Arc<Vec<Item>>, mark: Mark) {
        self.0.put((words.joined(), page), items, mark);
    }

    /// Entries held (approximately: moka counts lazily).
    pub fn len(&self) -> u64 {
        self.0.len()
    }

    /// True when it holds nothing.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}
