//! Search results kept in this web server's memory, so a popular search costs no
//! database read: keyed by the normalised words (what [`SearchWords`] makes of
//! the text: "Lamp!" and "lamp" are one entry) and the page. Only a process with
//! an in-process page tier keeps them, since its feed is what hears the other
//! processes' purges.
//!
//! - Bounded: [`MAX_BYTES`] of keys and results, by moka's TinyLFU, which admits
//!   a new entry only over colder ones: the popular searches stay, and a client
//!   making up a new search per request neither gets in nor pushes anyone out.
//! - Purged on every catalogue change: an entry is good while the process's
//!   count of purges seen ([`PurgesSeen`]: its own purges before they return,
//!   every other process's as its event arrives) is what it was before the
//!   results were read, and while the tier is subscribed; kept [`TTL`] at most.

use std::sync::Arc;
use std::time::Duration;

use moka::sync::Cache;
use shop_db::items::Item;
use shop_db::search::SearchWords;
use shop_page_cache::{PageStore, PurgesSeen};

use crate::page_cache::PageTier;

/// The most bytes of searches and results kept.
pub const MAX_BYTES: u64 = 16 << 20;
/// The longest an entry is kept (a backstop: purges end it sooner).
pub const TTL: Duration = Duration::from_secs(300);

/// One page of results, and the purge count before they were read.
struct Kept {
    items: Arc<Vec<Item>>,
    purges: u64,
}

/// The cache; see the module documentation.
pub struct SearchCache {
    results: Cache<(String, u32), Arc<Kept>>,
    purges: PurgesSeen,
    tier: Arc<PageTier>,
}

/// Taken before the database is read; hand it to [`SearchCache::put`].
#[derive(Debug, Clone, Copy)]
pub struct Mark(u64);

impl SearchCache {
    /// Results of `store`'s process, purged through `tier`'s feed.
    pub fn new(store: &PageStore, tier: Arc<PageTier>) -> Self {
        let results = Cache::builder()
            .max_capacity(MAX_BYTES)
            .weigher(|(words, _): &(String, u32), kept: &Arc<Kept>| {
                let items: usize = kept
                    .items
                    .iter()
                    .map(|it| 96 + it.title.len() + it.description.len() + it.category.len())
                    .sum();
                u32::try_from(64 + words.len() + items).unwrap_or(u32::MAX)
            })
            .time_to_live(TTL)
            .build();
        Self {
            results,
            purges: store.purges_seen().clone(),
            tier,
        }
    }

    /// The results of `words`' page `page`, if kept and still good.
    pub fn get(&self, words: &SearchWords, page: u32) -> Option<Arc<Vec<Item>>> {
        if !self.tier.is_trusted() {
            return None;
        }
        let kept = self.results.get(&(words.joined(), page))?;
        (kept.purges == self.purges.get()).then(|| kept.items.clone())
    }

    /// Read before the database is.
    pub fn mark(&self) -> Mark {
        Mark(self.purges.get())
    }

    /// Keeps `items`, read after `mark`, unless a purge came since.
    pub fn put(&self, words: &SearchWords, page: u32, items: Arc<Vec<Item>>, mark: Mark) {
        if !self.tier.is_trusted() || self.purges.get() != mark.0 {
            return;
        }
        self.results.insert(
            (words.joined(), page),
            Arc::new(Kept {
                items,
                purges: mark.0,
            }),
        );
    }

    /// Entries held (approximately: moka counts lazily).
    pub fn len(&self) -> u64 {
        self.results.entry_count()
    }

    /// True when it holds nothing.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}
