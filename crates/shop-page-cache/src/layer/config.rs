//! What a page-cache layer caches: which requests ([`Pages`]), what a page varies
//! on, how long a request waits for another's render, and who may skip the cache.

use std::time::Duration;

use http::HeaderName;
use shop_cache::domain::ItemId;

#[cfg(doc)]
use super::PageCacheLayer;

/// Which requests a layer may cache.
#[derive(Debug, Clone, Copy)]
pub enum Pages {
    /// Pages of single items, while the item is among the most viewed (the book's
    /// `can_cache`): the function names the item a path shows, or `None` for a
    /// path that is no item page (not cached).
    Ranked(fn(&str) -> Option<ItemId>),
    /// Any page: for pages that are the same for every visitor and always popular
    /// (the flash-sale shell, listings).
    Shared,
}

/// How a [`PageCacheLayer`] behaves.
#[derive(Debug, Clone)]
pub struct PageCacheConfig {
    /// Which requests qualify.
    pub pages: Pages,
    /// Request headers the pages vary on: each value is part of the key.
    pub vary: Vec<HeaderName>,
    /// Query parameters the pages read: only these are part of the key. Others are
    /// ignored (the page is the same with or without them), so random parameters
    /// cannot bust the cache. Ignored rather than passed through uncached: passing
    /// them through would let any client skip the cache, and its stampede
    /// protection, by adding `?r=<random>`.
    pub params: Vec<&'static str>,
    /// The longest a request waits for another's render before rendering itself.
    pub wait: Duration,
    /// How often a request polls Redis for a page another process is rendering.
    pub poll: Duration,
    /// Pages larger than this (or of unknown size) are served but not stored.
    pub max_body: usize,
}

/// On a request: skip the page cache (render, do not store). The app decides who
/// may (the shop: an admin's request with the book's `_` query parameter) and
/// inserts it in a middleware before the layer.
#[derive(Debug, Clone, Copy)]
pub struct CacheBypass;

impl PageCacheConfig {
    /// Caching `pages`, with the defaults for the rest: no header or parameter in
    /// the key, a wait of 2 s for another's render, pages up to 4 MiB.
    pub fn new(pages: Pages) -> Self {
        Self {
            pages,
            vary: Vec::new(),
            params: Vec::new(),
            wait: Duration::from_secs(2),
            poll: Duration::from_millis(20),
            max_body: 4 << 20,
        }
    }
}
