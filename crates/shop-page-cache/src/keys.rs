//! The page cache's Redis keys, built from the shop's [`Keys`] (its prefix and its
//! layout's hash-tag policy, applied there): the pages (in the cache Redis when
//! there is one), their tag indexes, purge marks, epoch and render locks, and the
//! page events' channel.

use shop_cache::keys::Keys;

use crate::PageTag;

/// The page cache's key names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PageKeys(Keys);

impl PageKeys {
    /// The page cache's keys of the shop whose keys are `keys`.
    pub fn new(keys: &Keys) -> Self {
        Self(keys.clone())
    }

    /// String: a cached page, under the stable hash of its normalised request.
    pub fn page(&self, request_hash: &str) -> String {
        self.0.named(format_args!("cache:{request_hash}"))
    }

    /// Sorted set: the hashes of the cached pages that show `tag` (an item, a
    /// department), each scored by the unix ms until which its page is kept, so a
    /// change purges exactly those. Entries past their time are trimmed as pages
    /// are added, and the key expires with the last page it indexes. In the
    /// cluster layout it shares its slot with [`PageKeys::tag_purged`], so one
    /// script reads both.
    pub fn tag(&self, tag: &PageTag) -> String {
        self.0.slotted("ptag:", "t", tag.as_str())
    }

    /// String: the purge epoch of the tag's last purge, kept a minute: a render
    /// that began before it (an older epoch) may hold old content and is not stored.
    pub fn tag_purged(&self, tag: &PageTag) -> String {
        self.0.slotted("ptag-purged:", "t", tag.as_str())
    }

    /// Hash: the purge epoch (`epoch`, advanced by each purge; a render reads it
    /// before it reads its data, and stores its page only if no tag of the page was
    /// purged since) and generation (`since`, the epoch at which this Redis last
    /// started without this hash: pages stored before it count as purged). See
    /// `store/purge_epoch.lua`.
    pub fn purges(&self) -> String {
        self.0.named("page-purges")
    }

    /// Pub/sub channel (no key): what each purge and each store of a page tells
    /// every web server's in-process tier ([`crate::PageEvent`]). On a cluster a
    /// plain `PUBLISH` reaches every node, so one channel serves both layouts.
    pub fn events(&self) -> String {
        self.0.named("page-events")
    }

    /// String: held (`SET NX PX`) by the one process rendering a missing page, so a
    /// popular page that expires is rendered once, not once per request.
    pub fn lock(&self, request_hash: &str) -> String {
        self.0.named(format_args!("lock:cache:{request_hash}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The names the shop has always used, so pages and marks written by an
    /// earlier release are found.
    #[test]
    fn book_layout_names() {
        let k = PageKeys::new(&Keys::default());
        let item = PageTag::item(42);
        assert_eq!(k.page("abc"), "cache:abc");
        assert_eq!(k.lock("abc"), "lock:cache:abc");
        assert_eq!(k.tag(&item), "ptag:i42");
        assert_eq!(k.tag_purged(&item), "ptag-purged:i42");
        assert_eq!(k.purges(), "page-purges");
        assert_eq!(k.events(), "page-events");
    }

    #[test]
    fn a_tag_and_its_mark_share_a_slot_and_tags_spread() {
        let k = PageKeys::new(&Keys::cluster("s:"));
        let (a, b) = (PageTag::item(42), PageTag::item(43));
        assert_eq!(k.tag(&a), "s:ptag:{ti42}");
        assert_eq!(k.tag_purged(&a), "s:ptag-purged:{ti42}");
        assert_ne!(k.tag(&a), k.tag(&b));
        assert!(k.page("x").starts_with("s:") && k.purges().starts_with("s:"));
    }
}
