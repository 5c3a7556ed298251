//! Database reads kept in this web server's memory until the next catalogue change:
//! search results ([`crate::search_cache`], a [`PurgedCopy`]) and the recently
//! viewed items that `/api/me` shows, serialized ([`ItemCopies`]). Only a process with an in-process page
//! tier keeps them, since its feed is what hears the other processes' purges.
//!
//! - Bounded: a budget of bytes. A [`PurgedCopy`] (keys a client makes up) by
//!   moka's TinyLFU, which admits a new entry only over colder ones: the popular
//!   entries stay, and a client making up a new key per request neither gets in
//!   nor pushes anyone out. [`ItemCopies`] holds only items that exist.
//! - Purged on every catalogue change: an entry is good while the process's count
//!   of purges seen ([`PurgesSeen`]: its own purges before they return, every
//!   other process's as its event arrives) is what it was before the database was
//!   read, and while the tier is subscribed; kept for a TTL at most.

use std::hash::Hash;
use std::sync::Arc;
use std::time::{Duration, Instant};

use moka::sync::Cache;
use serde_json::value::RawValue;
use shop_cache::domain::ItemId;
use shop_db::items::Item;
use shop_page_cache::{PageStore, PurgesSeen};

use crate::page_cache::PageTier;
use crate::templates::ItemView;

/// When a copy of database reads was taken: good while no purge has been seen
/// since ([`PurgesSeen`]: every catalogue change purges) and for a maximum age
/// at most (a backstop for purges missed). Taken before the database is read.
/// What [`ItemCopies`], [`crate::listing_ends`] and the home page's picks
/// (`catalogue::Featured`) keep their copies by.
#[derive(Debug, Clone, Copy)]
pub struct Stamp {
    purges: u64,
    taken: Instant,
}

impl Stamp {
    /// Now, by `purges`' count: take it before the database is read.
    pub fn take(purges: &PurgesSeen) -> Self {
        Self::at(purges.get())
    }

    /// Now, at the purge count `purges`.
    fn at(purges: u64) -> Self {
        Self {
            purges,
            taken: Instant::now(),
        }
    }

    /// No purge seen since, and younger than `max_age`.
    pub fn good(&self, purges: &PurgesSeen, max_age: Duration) -> bool {
        self.good_at(purges.get(), max_age)
    }

    /// [`Stamp::good`] while the purge count is `purges`.
    fn good_at(&self, purges: u64, max_age: Duration) -> bool {
        self.purges == purges && self.age() < max_age
    }

    /// How long ago it was taken.
    pub fn age(&self) -> Duration {
        self.taken.elapsed()
    }
}

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
    /// The bytes it takes in [`ItemCopies`], about: its JSON, its picture's
    /// URL, the value itself, its `Arc` and its slot in the map.
    pub fn bytes(&self) -> u64 {
        let fixed = std::mem::size_of::<Self>() + 2 * std::mem::size_of::<usize>() + 32;
        (fixed + self.json.get().len() + self.picture.len()) as u64
    }

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

/// The items `/api/me` lists as recently viewed (and the pictures drawn), so
/// a warm call reads no database and serializes no item.
///
/// Every entry is good for the same span (until the next purge seen), so the
/// copy is one map for that span, dropped whole when a purge is seen or
/// [`ITEM_TTL`] is up: a lookup is a read lock and a hash probe (a moka cache's
/// bookkeeping per lookup was a tenth of `/api/me`'s CPU with 25 items viewed).
/// Only items that exist get in (the keys are rows read from the database), and
/// at most [`ITEM_BYTES`] of them.
pub struct ItemCopies {
    span: std::sync::RwLock<Span>,
    purges: PurgesSeen,
    tier: Arc<PageTier>,
}

/// The items kept while the purge count is `purges`.
struct Span {
    stamp: Stamp,
    bytes: u64,
    items: std::collections::HashMap<ItemId, Arc<ShownItem>>,
}

impl Span {
    fn new(purges: u64) -> Self {
        Self {
            stamp: Stamp::at(purges),
            bytes: 0,
            items: std::collections::HashMap::new(),
        }
    }

    fn good_at(&self, purges: u64) -> bool {
        self.stamp.good_at(purges, ITEM_TTL)
    }

    /// Keeps `item` if it fits in `budget` bytes with what is kept already.
    fn keep(&mut self, id: ItemId, item: Arc<ShownItem>, budget: u64) {
        let bytes = item.bytes();
        if self.bytes + bytes > budget {
            return;
        }
        if self.items.insert(id, item).is_none() {
            self.bytes += bytes;
        }
    }
}

impl ItemCopies {
    /// Empty; purged with `store`'s process's purges as `tier`'s feed hears them.
    pub fn new(store: &PageStore, tier: Arc<PageTier>) -> Self {
        let purges = store.purges_seen().clone();
        Self {
            span: std::sync::RwLock::new(Span::new(purges.get())),
            purges,
            tier,
        }
    }

    /// The items kept for `ids`, in order (`None` where not kept).
    pub fn get_all(&self, ids: &[ItemId]) -> Vec<Option<Arc<ShownItem>>> {
        let span = self
            .span
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if !self.tier.is_trusted() || !span.good_at(self.purges.get()) {
            return vec![None; ids.len()];
        }
        ids.iter().map(|id| span.items.get(id).cloned()).collect()
    }

    /// Read before the database is.
    pub fn mark(&self) -> Mark {
        Mark(self.purges.get())
    }

    /// Keeps `item`, read after `mark`, unless a purge came since.
    pub fn put(&self, id: ItemId, item: Arc<ShownItem>, mark: Mark) {
        if !self.tier.is_trusted() || self.purges.get() != mark.0 {
            return;
        }
        let mut span = self
            .span
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        // A purge may have come while this waited for the lock; and a span of a
        // later count is never replaced by an older one.
        if self.purges.get() != mark.0 || span.stamp.purges > mark.0 {
            return;
        }
        if !span.good_at(mark.0) {
            *span = Span::new(mark.0);
        }
        span.keep(id, item, ITEM_BYTES);
    }

    /// Items held now (a span a purge ended still counts until the next put).
    pub fn len(&self) -> usize {
        self.span
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .items
            .len()
    }

    /// True when it holds nothing.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The most bytes of items kept ([`ShownItem::bytes`] each): room for the whole
/// catalogue of the scale the shop is built for (100,000 items) even if every
/// title had the 200 characters a title may have, in ASCII (about 450 bytes an
/// item then; a demo item takes about 200); about 80,000 such items if those
/// characters took 3 bytes each (CJK). Once full, an item not kept is read
/// from the database at each call until the span ends (a purge, or
/// [`ITEM_TTL`]).
pub const ITEM_BYTES: u64 = 64 << 20;

/// The longest an item is kept (a backstop: purges end it sooner).
pub const ITEM_TTL: Duration = Duration::from_secs(300);

/// [`ItemCopies`] of `store`'s process, purged through `tier`'s feed.
pub fn item_copies(store: &PageStore, tier: Arc<PageTier>) -> ItemCopies {
    ItemCopies::new(store, tier)
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
        ids.iter().copied().zip(copies.get_all(ids)).collect();
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

#[cfg(test)]
mod tests {
    use super::*;
    use shop_cache::domain::catalogue::MAX_TITLE;

    fn shown(id: u64, title: &str) -> Arc<ShownItem> {
        Arc::new(ShownItem::of(&Item {
            id: ItemId::new(id).unwrap(),
            title: title.to_owned(),
            description: String::new(),
            price_cents: 123_456,
            category: "kitchen-and-dining".to_owned(),
            retired: false,
            version: 1,
        }))
    }

    /// The bytes `count` items titled `title` take.
    fn weight(count: u64, title: &str) -> u64 {
        (1..=count).map(|id| shown(id, title).bytes()).sum()
    }

    #[test]
    fn the_whole_catalogue_fits_even_with_titles_as_long_as_they_may_be() {
        // The scale the shop is built for: 100,000 items, each with a title of
        // the most characters a title may have (two of them escaped in JSON).
        let ascii = format!("{}\"Deluxe\" mug", "x".repeat(MAX_TITLE - 12));
        assert_eq!(ascii.chars().count(), MAX_TITLE);
        let all = weight(100_000, &ascii);
        assert!(all <= ITEM_BYTES, "{all} bytes");
        assert!(all > 100_000 * 300, "the weight counts the JSON: {all}");
        // As ITEM_BYTES says: about 80,000 with titles of 3-byte characters.
        let cjk = "\u{5496}".repeat(MAX_TITLE);
        assert!(weight(80_000, &cjk) <= ITEM_BYTES);
        assert!(weight(90_000, &cjk) > ITEM_BYTES);
    }

    #[test]
    fn a_full_copy_keeps_what_it_holds_and_admits_nothing_more() {
        let title = "x".repeat(MAX_TITLE);
        let budget = 100 * shown(1, &title).bytes() + 10;
        let mut span = Span::new(0);
        for id in 1..=200 {
            span.keep(ItemId::new(id).unwrap(), shown(id, &title), budget);
        }
        let kept = span.items.len() as u64;
        assert!((90..=100).contains(&kept), "kept {kept}");
        assert!(span.bytes <= budget);
        assert!(span.bytes + shown(200, &title).bytes() > budget);
        assert!(span.items.contains_key(&ItemId::new(1).unwrap()));
        assert!(!span.items.contains_key(&ItemId::new(200).unwrap()));
        // The same item again is no more bytes.
        let before = span.bytes;
        span.keep(ItemId::new(1).unwrap(), shown(1, &title), budget);
        assert_eq!(span.bytes, before);
    }
}
