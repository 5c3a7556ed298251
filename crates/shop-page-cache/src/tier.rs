//! The in-process page tier: each web server keeps the pages it serves most in its
//! own memory, in front of the Redis page store, so a cached page costs no Redis
//! round trip at all.
//!
//! - Bounded in bytes ([`PageTier::new`]; `--page-tier-mb`, 64 MiB by default), by
//!   moka's TinyLFU: the popular pages stay. Each entry is a page ready to send
//!   (headers built, body gzip-compressed as stored and decompressed), so a hit
//!   parses and decompresses nothing.
//! - Filled only from what Redis holds: a page read from the store, or stored
//!   there by this process's render. An entry is served while it is fresh (never
//!   past the TTL Redis gave it); after that the request goes to Redis, which
//!   decides about serving it stale.
//! - Coherent across the fleet through [`PageEvent`]s on one pub/sub channel
//!   ([`TierFeed`]): a purge publishes the drop of the purged pages to every tier
//!   before it returns to its caller (each tier applies it as the event arrives,
//!   within milliseconds: BENCHMARKS.md, "purge reach"; a caller that must see the
//!   new page polls for it), and a page stored anew drops the old version from
//!   every other tier. A fill that raced an event is not kept (a generation counter,
//!   bumped before each invalidation and checked after each insert).
//! - Generations ([`crate::Generation`]): each entry records the
//!   generation of the state Redis's page bookkeeping its fill began in, and is
//!   neither served nor used as a fallback once a newer one is known (the state
//!   Redis lost its data, so purges could no longer find the pages: see
//!   `shop_cache::page_cache`). The feed learns the generation every
//!   [`HEARTBEAT`] and from the [`PageEvent::Generation`] a purge publishes.
//! - Trusted only while subscribed: until the feed has subscribed, and from the
//!   moment it finds its subscription gone (the connection closed, a ping
//!   unanswered), the tier serves nothing and keeps nothing, since events may be
//!   missed; when it subscribes again, it empties itself first.
//! - Stale-if-error for Redis: while Redis cannot answer a lookup (its breaker
//!   open, a node down), whatever the tier still holds is served, trusted or not,
//!   up to the page's stale-if-error window: a page the shop would serve stale
//!   from Redis too.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::{Generation, PageEvent, PageKey, PageStore, PurgesSeen, StoredPage, now_ms};
use futures::StreamExt;
use moka::sync::Cache;
use shop_cache::CacheError;
use shop_cache::RedisConn;
use shop_cache::daemon::Daemon;

use crate::layer::negotiate::Prepared;

/// The tier's default size.
pub const DEFAULT_TIER_BYTES: u64 = 64 << 20;

/// How long the feed's connection may stay quiet before it is pinged, and how long
/// the ping may take: a connection cut off without a reset is found within two of
/// these.
pub const HEARTBEAT: Duration = Duration::from_secs(1);

/// How long the feed waits before subscribing again after losing its subscription.
const RESUBSCRIBE_AFTER: Duration = Duration::from_millis(100);

/// A page in the tier.
#[derive(Debug)]
pub(super) struct TierEntry {
    /// Ready to send.
    pub(super) page: Prepared,
    /// Served from the tier until then (unix ms): the TTL Redis gave it.
    fresh_until_ms: u64,
    /// Served while Redis cannot answer until then (unix ms), and dropped then.
    keep_until_ms: u64,
    /// The generation its fill began in: not served once a newer one is known.
    since: u64,
}

impl TierEntry {
    /// Until when it is fresh (unix ms): the TTL Redis gave it.
    pub(super) fn fresh_until_ms(&self) -> u64 {
        self.fresh_until_ms
    }
}

/// Taken before a fill's Redis read ([`PageTier::generation`]), handed to the
/// insert: a fill that raced an event or a new generation is not kept.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct FillMark {
    events: u64,
    since: u64,
}

/// Counters for `/metrics`.
#[derive(Debug, Default)]
pub struct TierStats {
    /// Requests served from the tier.
    pub hits: AtomicU64,
    /// Requests served from the tier while Redis could not answer.
    pub fallbacks: AtomicU64,
    /// Pages put in the tier.
    pub fills: AtomicU64,
    /// Fills not kept: an event came while they were read, or the tier was not
    /// trusted.
    pub refused: AtomicU64,
    /// Events applied (purges and stores of other servers).
    pub events: AtomicU64,
    /// Times the tier was emptied because its subscription was lost.
    pub emptied: AtomicU64,
}

/// The tier; see the module documentation. One per process, shared by every
/// page-cache layer (item pages, their insights, listings, the sale page).
pub struct PageTier {
    pages: Cache<PageKey, Arc<TierEntry>>,
    trusted: AtomicBool,
    generation: AtomicU64,
    /// The store's generation of the state Redis's page bookkeeping.
    state_generation: Generation,
    /// The store's count of purges seen: other processes' are counted here.
    purges_seen: PurgesSeen,
    /// The store's [`PageStore::origin`]: its own stores are no reason to drop.
    origin: u64,
    /// How long past its TTL a page is served while Redis cannot answer.
    if_error: Duration,
    stats: TierStats,
}

struct Expiry;

impl moka::Expiry<PageKey, Arc<TierEntry>> for Expiry {
    fn expire_after_create(
        &self,
        _key: &PageKey,
        entry: &Arc<TierEntry>,
        _created_at: Instant,
    ) -> Option<Duration> {
        Some(Duration::from_millis(
            entry.keep_until_ms.saturating_sub(now_ms()),
        ))
    }
}

impl PageTier {
    /// A tier of at most `max_bytes` in front of `store` (whose origin and
    /// stale-if-error window it takes). Untrusted until a [`TierFeed`] subscribes.
    pub fn new(max_bytes: u64, store: &PageStore) -> Arc<Self> {
        let pages = Cache::builder()
            .max_capacity(max_bytes)
            .weigher(|_key: &PageKey, entry: &Arc<TierEntry>| {
                u32::try_from(entry.page.weight()).unwrap_or(u32::MAX)
            })
            .expire_after(Expiry)
            .build();
        Arc::new(Self {
            pages,
            trusted: AtomicBool::new(false),
            generation: AtomicU64::new(0),
            state_generation: store.generation().clone(),
            purges_seen: store.purges_seen().clone(),
            origin: store.origin(),
            if_error: store.grace().if_error,
            stats: TierStats::default(),
        })
    }

    /// The counters.
    pub fn stats(&self) -> &TierStats {
        &self.stats
    }

    /// True while subscribed (the tier serves and fills).
    pub fn is_trusted(&self) -> bool {
        self.trusted.load(Ordering::Acquire)
    }

    /// Pages held (approximately: moka counts lazily).
    pub fn len(&self) -> u64 {
        self.pages.entry_count()
    }

    /// True when it holds nothing.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Bytes held (approximately).
    pub fn bytes(&self) -> u64 {
        self.pages.weighted_size()
    }

    /// Read before a fill's Redis read; hand it to the insert.
    pub(super) fn generation(&self) -> FillMark {
        FillMark {
            events: self.generation.load(Ordering::Acquire),
            since: self.state_generation.since(),
        }
    }

    /// Whether `entry` was filled in the generation known now.
    fn current(&self, entry: &TierEntry) -> bool {
        entry.since >= self.state_generation.since()
    }

    /// The page under `key`, if trusted, fresh and of the known generation.
    pub(super) fn fresh(&self, key: &PageKey) -> Option<Arc<TierEntry>> {
        if !self.is_trusted() {
            return None;
        }
        let entry = self.pages.get(key)?;
        (now_ms() < entry.fresh_until_ms && self.current(&entry)).then(|| {
            self.stats.hits.fetch_add(1, Ordering::Relaxed);
            entry
        })
    }

    /// The page under `key` while Redis cannot answer, trusted or not, within its
    /// stale-if-error window.
    pub(super) fn fallback(&self, key: &PageKey) -> Option<Arc<TierEntry>> {
        let entry = self.pages.get(key)?;
        (now_ms() < entry.keep_until_ms && self.current(&entry)).then(|| {
            self.stats.fallbacks.fetch_add(1, Ordering::Relaxed);
            entry
        })
    }

    /// Keeps `page` (fresh until `fresh_until_ms`, as Redis has it), unless an
    /// event came since `since` ([`PageTier::generation`] before the page was read)
    /// or the tier is not trusted.
    pub(super) fn insert(
        &self,
        key: &PageKey,
        page: &StoredPage,
        fresh_until_ms: u64,
        since: FillMark,
    ) {
        let current = || self.is_trusted() && self.generation() == since;
        if !current() || now_ms() >= fresh_until_ms {
            self.stats.refused.fetch_add(1, Ordering::Relaxed);
            return;
        }
        let Ok(page) = Prepared::of(page, true) else {
            return;
        };
        self.pages.insert(
            key.clone(),
            Arc::new(TierEntry {
                page,
                fresh_until_ms,
                keep_until_ms: fresh_until_ms + self.if_error.as_millis() as u64,
                since: since.since,
            }),
        );
        // An event that came while this was inserted bumped the generation before
        // it dropped anything: either it dropped this entry, or this sees it.
        if current() {
            self.stats.fills.fetch_add(1, Ordering::Relaxed);
        } else {
            self.pages.invalidate(key);
            self.stats.refused.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Applies what another server (or a purge) said.
    pub fn apply(&self, event: &PageEvent) {
        match event {
            PageEvent::Stored { by, .. } if *by == self.origin => return,
            _ => {}
        }
        self.generation.fetch_add(1, Ordering::AcqRel);
        match event {
            PageEvent::Purged(keys) => {
                for key in keys {
                    self.pages.invalidate(key);
                }
                self.purges_seen.bump_purge();
            }
            PageEvent::Stored { key, .. } => self.pages.invalidate(key),
            PageEvent::Generation(since) => {
                // Older entries are not served from now on; the memory goes too.
                self.state_generation.learn(*since);
                self.pages.invalidate_all();
            }
        }
        self.stats.events.fetch_add(1, Ordering::Relaxed);
    }

    /// The subscription is gone: serve and keep nothing until subscribed again
    /// (what is held stays, for Redis outages only).
    pub fn distrust(&self) {
        self.generation.fetch_add(1, Ordering::AcqRel);
        // Purges may be missed from now on.
        self.purges_seen.bump();
        self.trusted.store(false, Ordering::Release);
    }

    /// Subscribed (again): empty the tier, since events may have been missed, then
    /// trust it.
    pub fn empty_and_trust(&self) {
        self.generation.fetch_add(1, Ordering::AcqRel);
        self.purges_seen.bump();
        self.pages.invalidate_all();
        self.stats.emptied.fetch_add(1, Ordering::Relaxed);
        self.trusted.store(true, Ordering::Release);
    }
}

/// What one [`TierFeed::step`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FeedStep {
    /// Subscribed; the tier was emptied and is trusted.
    Subscribed,
    /// An event arrived and was applied (or was not one, and was ignored).
    Event,
    /// Nothing for a heartbeat; the connection answered a ping.
    Quiet,
    /// The subscription is gone; the tier is not trusted until the next one.
    Lost,
}

/// The daemon that keeps one [`PageTier`] coherent: it holds the subscription to
/// the page events and applies them, and trusts the tier only while subscribed.
/// Each web server runs one.
pub struct TierFeed {
    tier: Arc<PageTier>,
    store: PageStore,
    /// When the generation was last checked.
    checked: Option<Instant>,
    conn: RedisConn,
    channel: String,
    subscription: Option<(redis::aio::PubSubSink, redis::aio::PubSubStream)>,
}

impl TierFeed {
    /// The feed of `tier`, from the events of `store`.
    pub fn new(tier: Arc<PageTier>, store: &PageStore) -> Self {
        let (conn, channel) = store.events();
        Self {
            tier,
            store: store.clone(),
            checked: None,
            conn,
            channel,
            subscription: None,
        }
    }

    /// Learns the state Redis's generation if it was not checked for a
    /// [`HEARTBEAT`]: a loss of the state Redis is found within about a second
    /// even where no purge publishes it.
    async fn check_generation(&mut self) {
        if self.checked.is_some_and(|at| at.elapsed() < HEARTBEAT) {
            return;
        }
        self.checked = Some(Instant::now());
        if let Err(error) = self.store.check_generation().await {
            tracing::debug!(%error, "page tier could not check the page generation");
        }
    }

    /// Subscribes if it is not, else waits (up to a [`HEARTBEAT`], then pings) for
    /// the next event and applies it, and checks the generation every
    /// [`HEARTBEAT`]: the single step.
    pub async fn step(&mut self) -> Result<FeedStep, CacheError> {
        self.check_generation().await;
        let Some((sink, stream)) = self.subscription.as_mut() else {
            let subscription = self.conn.subscribe(&self.channel).await.inspect_err(|_| {
                self.tier.distrust();
            })?;
            self.subscription = Some(subscription);
            self.tier.empty_and_trust();
            tracing::info!("page tier subscribed to page events; emptied");
            return Ok(FeedStep::Subscribed);
        };
        let alive = match tokio::time::timeout(HEARTBEAT, stream.next()).await {
            Ok(Some(message)) => {
                match PageEvent::decode(message.get_payload_bytes()) {
                    Some(event) => self.tier.apply(&event),
                    None => tracing::warn!("ignored a message on the page events channel"),
                }
                return Ok(FeedStep::Event);
            }
            Ok(None) => false,
            Err(_) => matches!(
                tokio::time::timeout(HEARTBEAT, sink.ping::<redis::Value>()).await,
                Ok(Ok(_))
            ),
        };
        if alive {
            return Ok(FeedStep::Quiet);
        }
        self.subscription = None;
        self.tier.distrust();
        tracing::warn!("page tier lost its subscription; not serving from it until subscribed");
        Ok(FeedStep::Lost)
    }
}

impl Daemon for TierFeed {
    const NAME: &'static str = "page-tier-feed";
    type Error = CacheError;

    async fn tick(&mut self) -> Result<Duration, CacheError> {
        Ok(match self.step().await? {
            FeedStep::Lost => RESUBSCRIBE_AFTER,
            _ => Duration::ZERO,
        })
    }
}
