//! A page cache for axum apps, in Redis: whole rendered pages at `cache:<key>` for a
//! few minutes, shared by every web server, purged by tag, served stale while one
//! request renders, and copied into each process's memory where it pays.
//!
//! The app decides what is cached and what a page shows; this crate knows no
//! route. The parts:
//!
//! - [`PageRequest`] normalises a request (path, sorted query, the headers a page
//!   varies on) and hashes it with SHA-256 into a [`PageKey`] that is the same in
//!   every process and release (the book used Python's per-process `hash()`).
//! - [`StoredPage`] is what is kept: status, the headers needed to replay the
//!   response, an ETag, and the body gzip-compressed. Gzip because every client that
//!   accepts any compression accepts gzip, so the stored bytes go out as they are;
//!   `cargo bench -p shop-page-cache --bench page_compression` compares it with zstd and
//!   brotli on an item page.
//! - [`PageStore`] reads a page together with the item's rank (one round
//!   trip), stores pages with a TTL, and holds the short lock that lets one process
//!   render a missing page while the others wait for it.
//! - Tags and purge: every stored page is indexed under the [`PageTag`]s of what it
//!   shows (its items, its department), and [`PageStore::purge`] replaces every page
//!   of a tag by a tombstone, on every web server at once (they share Redis), on one
//!   node or a cluster. A render that began before a purge can hold old content, so
//!   it is not stored: a render first takes a [`RenderTicket`] (the purge epoch, read
//!   before the database is), and the store is refused if any of the page's tags was
//!   purged at a later epoch (`store/tag_page.lua`), or a tombstone of a later epoch sits on
//!   the page's key (`store/store_page.lua`). Whichever order the purge and the store run
//!   in, no old page is served after the purge returns (see the scripts).
//! - Generations: the tag indexes and the purge epoch live in the state Redis,
//!   the pages in the cache Redis. A state Redis that lost its data (restarted
//!   empty, flushed, a replica that missed writes took over) would leave a purge
//!   nothing to find, so the epoch's hash (`page-purges`) also holds the epoch at
//!   which the state's current generation began (`store/purge_epoch.lua`): the first
//!   call after a loss starts a new one. Each entry records the epoch its render
//!   began at, and every process knows the generation ([`Generation`]: learnt at
//!   each render and purge, by the tier's feed every second, and from the
//!   [`PageEvent::Generation`] the process that found the loss publishes before
//!   its purge returns); an entry older than the generation counts as purged,
//!   in Redis and in every in-process tier. Epochs come from Redis's clock, so
//!   they never go backwards.
//! - Serve-stale: an entry records until when it is fresh and is kept past that
//!   for its [`StaleGrace`] (RFC 5861's `stale-while-revalidate` and
//!   `stale-if-error`); [`PageStore::lookup`] answers [`Lookup::Stale`] for it, and
//!   the web layer decides what to do (serve it and render in the background, or
//!   serve it instead of an error). Stale copies stay indexed under their tags, so
//!   a purge removes them too: a purged page is never served stale.
//!
//! - The tower layer, [`PageCacheLayer`] ([`layer`]): which requests and responses
//!   qualify, serving (gzip, `If-None-Match`, `HEAD`), single flight inside a
//!   process, the Redis render lock across processes. What it caches is set by a
//!   [`PageCacheConfig`]: [`Pages::Ranked`] with the app's function from a path to
//!   the item it shows (cached while [`PageStore::ranked`] says the item is among
//!   the most viewed), or [`Pages::Shared`]; a request carrying [`CacheBypass`]
//!   (the app decides who may) skips it; a handler names what its page shows by a
//!   [`PageTags`] extension on its response.
//! - The in-process tier ([`tier`]): recently served pages kept in memory, kept
//!   coherent across the web servers by the [`PageEvent`]s its [`TierFeed`]
//!   applies.
//!
//! `examples/product_pages.rs` mounts it in a small axum app.
//!
//! ```no_run
//! use axum::{Router, routing::get};
//! use shop_cache::keys::Keys;
//! use shop_page_cache::{DEFAULT_TTL, PageCacheConfig, PageCacheLayer, PageStore, Pages};
//!
//! # async fn demo() -> Result<(), shop_cache::CacheError> {
//! let conn = shop_cache::connect("redis://127.0.0.1:6379").await?;
//! let store = PageStore::new(conn, &Keys::with_prefix("app:"), DEFAULT_TTL);
//! let app: Router = Router::new()
//!     .route("/about", get(|| async { "the same page for everyone" }))
//!     .layer(PageCacheLayer::new(store, PageCacheConfig::new(Pages::Shared)));
//! # Ok(()) }
//! ```

mod edge_purge;
mod event;
mod generation;
mod key;
mod keys;
pub mod layer;
mod store;
mod stored;
mod tag;
pub mod tier;

pub use edge_purge::{
    EDGE_PURGE_TIMEOUT, EDGE_REPURGE_AFTER, EdgePurgeError, EdgePurger, MAX_PURGE_HEADER_BYTES,
    XKEY_PURGE,
};
pub use event::PageEvent;
pub use generation::{Generation, PurgesSeen};
pub use key::{PageKey, PageRequest};
pub use keys::PageKeys;
pub use layer::{
    CacheBypass, MAX_SURROGATE_KEY_BYTES, MAX_SURROGATE_KEYS, PageCache, PageCacheConfig,
    PageCacheLayer, PageCacheStats, Pages, SURROGATE_KEY, X_CACHE,
};
pub use store::{
    DEFAULT_RANK_LIMIT, DEFAULT_STALE, DEFAULT_TTL, LOCK_TTL, Lookup, MAX_RENDER, PURGE_MARK_TTL,
    PageStore, RenderLock, RenderTicket, Stored,
};
pub use stored::{StaleGrace, StoredPage, now_ms};
pub use tag::{PageTag, PageTags};
pub use tier::{PageTier, TierFeed};

/// Logs a Redis failure the layer or the tier met and went on without: quietly
/// when the connection already knew Redis was down (the outage was logged once
/// when it began), as a warning otherwise.
fn log_failure(error: &shop_cache::CacheError, what: &str) {
    if error.is_failing_fast() {
        tracing::debug!("{what}: {error}");
    } else {
        tracing::warn!("{what}: {error}");
    }
}
