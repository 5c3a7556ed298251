//! The page cache's keys: the pages (in the cache Redis when there is one), their
//! tag indexes, purge marks, epoch and render locks, and the page events' channel.

use super::{Keys, Layout};

impl Keys {
    /// String: a cached page, under the stable hash of its normalised request.
    pub fn page(&self, request_hash: &str) -> String {
        format!("{}cache:{request_hash}", self.0.prefix)
    }

    /// Sorted set: the hashes of the cached pages that show `tag` (an item, a
    /// department), each scored by the unix ms until which its page is kept, so a
    /// change purges exactly those. Entries past their time are trimmed as pages
    /// are added, and the key expires with the last page it indexes. In
    /// the cluster layout the tag is the key's hash tag, shared with
    /// [`Keys::page_tag_purged`], so one script reads both.
    pub fn page_tag(&self, tag: &str) -> String {
        self.tag_key("ptag:", tag)
    }

    /// String: the purge epoch of the tag's last purge, kept a minute: a render
    /// that began before it (an older epoch) may hold old content and is not stored.
    pub fn page_tag_purged(&self, tag: &str) -> String {
        self.tag_key("ptag-purged:", tag)
    }

    /// Hash: the page cache's purge epoch (`epoch`, advanced by each purge; a
    /// render reads it before it reads the database, and stores its page only if
    /// no tag of the page was purged since) and generation (`since`, the epoch at
    /// which the state Redis last started without this hash: pages stored before
    /// it count as purged). See `page_cache` and `purge_epoch.lua`.
    pub fn page_purges(&self) -> String {
        format!("{}page-purges", self.0.prefix)
    }

    /// Pub/sub channel (no key): what each purge and each store of a page tells
    /// every web server's in-process page tier (see `page_cache::PageEvent`). On a
    /// cluster a plain `PUBLISH` reaches every node, so one channel serves both
    /// layouts.
    pub fn page_events(&self) -> String {
        format!("{}page-events", self.0.prefix)
    }

    fn tag_key(&self, name: &str, tag: &str) -> String {
        match self.0.layout {
            Layout::Book => format!("{}{name}{tag}", self.0.prefix),
            Layout::Cluster { .. } => format!("{}{name}{{t{tag}}}", self.0.prefix),
        }
    }

    /// String: held (`SET NX PX`) by the one process rendering a missing page, so a
    /// popular page that expires is rendered once, not once per request.
    pub fn page_lock(&self, request_hash: &str) -> String {
        format!("{}lock:cache:{request_hash}", self.0.prefix)
    }
}
