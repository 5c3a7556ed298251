//! Database reads kept in this web server's memory until the next catalogue change:
//! search results ([`crate::search_cache`]) and the recently viewed items that
//! `/api/me` shows, serialized ([`ItemCopies`]). Only a process with an in-process page
//! tier keeps them, since its feed is what hears the other processes' purges.
//!
//! - Bounded: a budget of bytes, by moka's TinyLFU, which admits a new entry only
//!   over colder ones: the popular entries stay, and a client making up a new
//!   key per request neither gets in nor pushes anyone out.
//! - Purged on every catalogue change: an entry is good while the process's count
//!   of purges seen ([`PurgesSeen`]: its own purges before they return, every
//!   other process's as its event arrives) is what it was before the database was
//!   read, and while the tier is subscribed; kept for a TTL at most.

use std::hash::Hash;
use std::sync::Arc;
use std::time::Duration;

use moka::sync::Cache;
use serde_json::value::RawValue;
use shop_cache::domain::ItemId;
use shop_db::items::Item;
use shop_page_cache::{PageStore, PurgesSeen};

use crate::page_cache::PageTier;
use crate::templates::ItemView;

/// A value, and the purge count before it was read.
struct Kept<V> {
    value: Arc<V>,
    purges: u64,
}

/// The copy; see the module documentation.
pub struct PurgedCopy<K, V> {
    entries: Cache<K, Arc<Kept<V>>>,
    purges: PurgesSeen,
    tier: Arc<PageTier>,
}

/// Taken before the database is read; hand it to [`PurgedCopy::put`].
#[derive(Debug, Clone, Copy)]
pub struct Mark(u64);

impl<K, V> PurgedCopy<K, V>
where
    K: Hash + Eq + Send + Sync + 'static,
    V: Send + Sync + 'static,
{
    /// At most `max_bytes` (as `weigh` counts an entry) for at most `ttl`, purged
    /// with `store`'s process's purges as `tier`'s feed hears them.
    pub fn new(
        store: &PageStore,
        tier: Arc<PageTier>,
        max_bytes: u64,
        ttl: Duration,
        weigh: fn(&K, &V) -> usize,
    ) -> Self {
        let entries = Cache::builder()
            .max_capacity(max_bytes)
            .weigher(move |key: &K, kept: &Arc<Kept<V>>| {
                u32::try_from(weigh(key, &kept.value)).unwrap_or(u32::MAX)
            })
            .time_to_live(ttl)
            .build();
        Self {
            entries,
            purges: store.purges_seen().clone(),
            tier,
        }
    }

    /// The value kept for `key`, if kept and still good.
    pub fn get(&self, key: &K) -> Option<Arc<V>> {
        if !self.tier.is_trusted() {
            return None;
        }
        let kept = self.entries.get(key)?;
        (kept.purges == self.purges.get()).then(|| kept.value.clone())
    }

    /// Read before the database is.
    pub fn mark(&self) -> Mark {
        Mark(self.purges.get())
    }

    /// Keeps `value`, read after `mark`, unless a purge came since.
    pub fn put(&self, key: K, value: Arc<V>, mark: Mark) {
        if !self.tier.is_trusted() || self.purges.get() != mark.0 {
            return;
        }
        let kept = Kept {
            value,
            purges: mark.0,
        };
        self.entries.insert(key, Arc::new(kept));
    }

    /// Entries held (approximately: moka counts lazily).
    pub fn len(&self) -> u64 {
        self.entries.entry_count()
    }

    /// True when it holds nothing.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The bytes an item row takes, about.
pub fn item_bytes(item: &Item) -> usize {
    96 + item.title.len() + item.description.len() + item.category.len()
}

/// An item as `/api/me` lists it: its JSON (`{"id", "title", "price",
/// "picture"}`, as [`ItemView`] serializes), written once per copy instead of
/// once per call.
#[derive(Debug)]
pub struct ShownItem {
    /// The item is retired (it is listed nowhere then).
    pub retired: bool,
    /// Its JSON.
    pub json: Box<RawValue>,
    /// Its picture's URL ([`crate::pictures`] draws only the pictures of items).
    pub picture: String,
}

impl ShownItem {
    /// `item` as listed.
    pub fn of(item: &Item) -> Self {
        let view = ItemView::from(item);
        Self {
            retired: item.retired,
            json: serde_json::value::to_raw_value(&view).expect("an item view serializes"),
            picture: view.picture,
        }
    }
}

/// The items `/api/me` lists as recently viewed, so a warm call reads no
/// database and serializes no item.
pub type ItemCopies = PurgedCopy<ItemId, ShownItem>;

/// The most bytes of items kept: the hot items' (one is a hundred bytes or so,
/// so a hundred thousand of them).
pub const ITEM_BYTES: u64 = 16 << 20;

/// The longest an item is kept (a backstop: purges end it sooner).
pub const ITEM_TTL: Duration = Duration::from_secs(300);

/// [`ItemCopies`] of `store`'s process, purged through `tier`'s feed.
pub fn item_copies(store: &PageStore, tier: Arc<PageTier>) -> ItemCopies {
    PurgedCopy::new(store, tier, ITEM_BYTES, ITEM_TTL, |_, shown| {
        48 + shown.json.get().len()
    })
}

/// The items `ids` (those that exist, in that order), from `copies` where it
/// holds them and from the database for the rest, which are then kept.
pub async fn items(
    db: &shop_db::Db,
    copies: Option<&ItemCopies>,
    ids: &[ItemId],
) -> Result<Vec<Arc<ShownItem>>, shop_db::DbError> {
    let Some(copies) = copies else {
        let items = db.items(ids).await?;
        return Ok(items
            .iter()
            .map(|item| Arc::new(ShownItem::of(item)))
            .collect());
    };
    let mut found: Vec<(ItemId, Option<Arc<ShownItem>>)> =
        ids.iter().map(|&id| (id, copies.get(&id))).collect();
    let missing: Vec<ItemId> = found
        .iter()
        .filter(|(_, item)| item.is_none())
        .map(|&(id, _)| id)
        .collect();
    if !missing.is_empty() {
        let mark = copies.mark();
        let read = db.items_by_id(&missing).await?;
        for (id, slot) in found.iter_mut().filter(|(_, item)| item.is_none()) {
            if let Some(item) = read.get(id) {
                let shown = Arc::new(ShownItem::of(item));
                copies.put(*id, shown.clone(), mark);
                *slot = Some(shown);
            }
        }
    }
    Ok(found.into_iter().filter_map(|(_, item)| item).collect())
}
