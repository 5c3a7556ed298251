//! [`PageStore`]: the pages in Redis. A lookup reads a page together with its
//! item's rank (one round trip); a store is refused when a purge since the
//! render began forbids it; a purge replaces every page of its tags by a
//! tombstone and tells every process's tier. The scripts that make each of
//! these one atomic step sit beside this file (`store/*.lua`).

use std::sync::{Arc, LazyLock};
use std::time::Duration;

use redis::{AsyncCommands, Script};
use shop_cache::domain::ItemId;
use shop_cache::keys::Keys;
use shop_cache::scripts::eval;
use shop_cache::{CacheError, RedisConn};

use crate::keys::PageKeys;
use crate::stored::{Entry, TOMBSTONE, decode_entry, encode_entry};
use crate::{Generation, PageEvent, PageKey, PageTag, PurgesSeen, StaleGrace, StoredPage, now_ms};

/// Indexes a page under one tag and says whether a purge since forbids storing it.
/// Sent in pipelines, one per tag, so by `EVAL` ([`eval`]).
const TAG_PAGE: &str = include_str!("store/tag_page.lua");

/// Stores a page unless a purge since its render began left a tombstone.
static STORE_PAGE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("store/store_page.lua")));

/// The purge epoch and generation (`purge_epoch.lua`).
static PURGE_EPOCH: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("store/purge_epoch.lua")));

/// One tag's part of a purge: the mark, and the pages to replace by tombstones.
/// Sent in pipelines, one per tag, so by `EVAL` ([`eval`]).
const PURGE_TAG: &str = include_str!("store/purge_tag.lua");

/// Replaces a purged page by a tombstone unless a newer purge's is there.
/// Sent in pipelines, one per page, so by `EVAL` ([`eval`]).
const TOMBSTONE_SCRIPT: &str = include_str!("store/tombstone.lua");

/// How long a page is kept, as in the book.
pub const DEFAULT_TTL: Duration = Duration::from_secs(300);
/// Only items ranked below this in `viewed:` are cached (ranks 0..=9,999).
pub const DEFAULT_RANK_LIMIT: u64 = 10_000;
/// The shop's serve-stale windows: a minute while revalidating, an hour while the
/// database cannot render the page.
pub const DEFAULT_STALE: StaleGrace = StaleGrace {
    while_revalidate: Duration::from_secs(60),
    if_error: Duration::from_secs(3_600),
};
/// How long the render lock lives if its holder dies before releasing it.
pub const LOCK_TTL: Duration = Duration::from_secs(5);
/// How long a purge's marks (its tombstones, each tag's purge epoch) are kept: a
/// render older than [`MAX_RENDER`] is never stored, so no render that began before
/// a purge can reach its store after the marks are gone.
pub const PURGE_MARK_TTL: Duration = Duration::from_secs(60);
/// The oldest a render may be (from its [`RenderTicket`]) and still be stored.
pub const MAX_RENDER: Duration = Duration::from_secs(30);

/// Taken before a render reads anything: the purge epoch then, its generation, and
/// when.
#[derive(Debug, Clone, Copy)]
pub struct RenderTicket {
    epoch: u64,
    since: u64,
    began: std::time::Instant,
}

/// The answer to [`PageStore::store`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stored {
    /// The page is stored.
    Yes,
    /// Not stored: a tag of the page was purged since its render began (it may
    /// show old content), or the render took longer than [`MAX_RENDER`].
    Refused,
}

/// The outcome of a lookup.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Lookup {
    /// The item is not among the most viewed: do not cache its page.
    NotPopular,
    /// A stored page, fresh.
    Hit(StoredPage),
    /// A stored page past its TTL, within the [`StaleGrace`] it was stored with.
    Stale {
        /// The page.
        page: StoredPage,
        /// How long ago it expired.
        expired: Duration,
    },
    /// Cacheable, but nothing stored (or what was stored is unreadable).
    Miss,
}

/// A held render lock; pass it back to [`PageStore::unlock`].
pub type RenderLock = shop_cache::lock::Lock;

/// Pages replaced by tombstones per round trip of a purge.
const PURGE_CHUNK: usize = 1_000;

/// The book's gate on item pages: kept only for items ranked below `limit` in the
/// sorted set `ranking`, answered in process by `top` where it knows.
struct RankGate {
    ranking: String,
    limit: u64,
    top: Option<Box<dyn Fn(ItemId) -> Option<bool> + Send + Sync>>,
}

/// Cached pages in Redis.
#[derive(Clone)]
pub struct PageStore {
    conn: RedisConn,
    /// Where the view ranking, the tag indexes, the purge marks and the purge
    /// epoch are, when the pages are in a cache Redis of their own
    /// ([`PageStore::with_state_in`]).
    state: Option<RedisConn>,
    keys: PageKeys,
    ttl: Duration,
    /// The book's gate on item pages ([`PageStore::ranked`]); none: every item
    /// page is kept.
    gate: Option<Arc<RankGate>>,
    grace: StaleGrace,
    /// Names this store (and its clones) in the [`PageEvent::Stored`] it sends.
    origin: u64,
    /// The generation this process knows.
    generation: Generation,
    /// The purges this process has seen.
    purges_seen: PurgesSeen,
    /// The edge caches in front of the shop a purge also reaches
    /// ([`PageStore::with_edges`]).
    edges: Option<crate::EdgePurger>,
}

impl PageStore {
    /// Pages under `keys` (their prefix and layout), kept for `ttl`: every item
    /// page, until [`PageStore::ranked`] gates them by popularity.
    pub fn new(conn: RedisConn, keys: &Keys, ttl: Duration) -> Self {
        let mut origin = [0u8; 8];
        // A clash of two random 64-bit origins only costs a tier one invalidation.
        let _ = getrandom::fill(&mut origin);
        Self {
            conn,
            state: None,
            keys: PageKeys::new(keys),
            ttl,
            gate: None,
            grace: StaleGrace::default(),
            origin: u64::from_be_bytes(origin),
            generation: Generation::default(),
            purges_seen: PurgesSeen::default(),
            edges: None,
        }
    }

    /// The purges this process has seen (shared with its in-process tier, which
    /// counts those of other processes).
    pub fn purges_seen(&self) -> &PurgesSeen {
        &self.purges_seen
    }

    /// The generation this process knows (shared with its in-process tier).
    pub fn generation(&self) -> &Generation {
        &self.generation
    }

    /// Reads the purge epoch and the generation (advancing the epoch for a purge),
    /// starting a new generation if the state Redis has none, and learns it: one
    /// this call started, or a newer one than this process knew, is published to
    /// every web server. Returns `(epoch, since)`.
    async fn epoch(&self, advance: bool) -> Result<(u64, u64), CacheError> {
        let (epoch, since, started): (u64, u64, u8) = PURGE_EPOCH
            .key(self.keys.purges())
            .arg(if advance { "1" } else { "0" })
            .invoke_async(&mut self.state())
            .await?;
        let newer = self
            .generation
            .learn(since)
            .is_some_and(|before| before != 0);
        if newer {
            tracing::warn!(
                "the state Redis lost the page cache's bookkeeping (restarted empty, flushed or \
                 failed over): every page stored before counts as purged"
            );
        } else if started == 1 {
            tracing::info!(
                "started the page cache's purge bookkeeping (a new shop, or a state Redis that \
                 lost its data): every page stored before counts as purged"
            );
        }
        if started == 1 || newer {
            self.publish(&[PageEvent::Generation(since)]).await?;
        }
        Ok((epoch, since))
    }

    /// Learns the state Redis's page generation now (starting one if it has none):
    /// the in-process tier's feed calls it every second, so a server finds a loss
    /// of the state Redis without rendering or purging anything.
    pub async fn check_generation(&self) -> Result<u64, CacheError> {
        Ok(self.epoch(false).await?.1)
    }

    /// Item pages kept only while their item ranks below `limit` in the sorted set
    /// `ranking` (the book's `can_cache`: rank 0 is the most viewed); an item with
    /// no score there is not kept. The rank is read with the page, in one round
    /// trip.
    pub fn ranked(mut self, ranking: &str, limit: u64) -> Self {
        self.gate = Some(Arc::new(RankGate {
            ranking: ranking.to_owned(),
            limit,
            top: None,
        }));
        self
    }

    /// The gate answered in process where `top` knows the answer: `Some(true)`
    /// for an item among the ranked ones, `Some(false)` for one that is not,
    /// `None` when it cannot tell (its copy is stale), and then the rank is asked
    /// of Redis as without it. While `top` knows, a page of a top item costs
    /// Redis only its `GET` (and nothing at all from the in-process tier). An
    /// item not known to be in the top is asked about with a `ZRANK`, so an item
    /// that just entered it is cached at once. Call after [`PageStore::ranked`].
    pub fn with_top(
        mut self,
        top: impl Fn(ItemId) -> Option<bool> + Send + Sync + 'static,
    ) -> Self {
        if let Some(gate) = &self.gate {
            self.gate = Some(Arc::new(RankGate {
                ranking: gate.ranking.clone(),
                limit: gate.limit,
                top: Some(Box::new(top)),
            }));
        }
        self
    }

    /// Commands sent to the pages' own Redis when it is not the state Redis (0
    /// when they share it: those are counted on the state handle).
    pub fn cache_commands_sent(&self) -> u64 {
        match self.state {
            Some(_) => self.conn.commands_sent(),
            None => 0,
        }
    }

    /// Names this process's stores in [`PageEvent::Stored`].
    pub fn origin(&self) -> u64 {
        self.origin
    }

    /// The channel of the [`PageEvent`]s, and the Redis that carries it (the state
    /// Redis: it never evicts, and every web server shares it).
    pub fn events(&self) -> (RedisConn, String) {
        (self.state(), self.keys.events())
    }

    /// Pages in `cache` when the shop has a cache Redis (with what purges rely on
    /// in `state`, [`PageStore::with_state_in`]), else in `state` with everything
    /// else.
    pub fn in_cache_or_state(
        cache: Option<RedisConn>,
        state: RedisConn,
        keys: &Keys,
        ttl: Duration,
    ) -> Self {
        match cache {
            Some(cache) => Self::new(cache, keys, ttl).with_state_in(state),
            None => Self::new(state, keys, ttl),
        }
    }

    /// These pages in a Redis of their own (a cache Redis that may evict them), and
    /// in `state` (the Redis that never evicts) what a purge relies on: the view
    /// ranking the gate reads, the tag indexes, the purge marks and the purge epoch.
    /// The cache Redis then holds only pages, tombstones and render locks, each
    /// one safe to lose: a lost page or tombstone is a render, a lost lock a
    /// second render, and a render that began before a purge is still refused by
    /// the tag's mark. (An evicted tag index would let a purge miss its pages.)
    /// A lookup asks both at once: the same single wait.
    pub fn with_state_in(mut self, state: RedisConn) -> Self {
        self.state = Some(state);
        self
    }

    /// The Redis of the ranking, tag indexes, marks and epoch.
    fn state(&self) -> RedisConn {
        self.state.as_ref().unwrap_or(&self.conn).clone()
    }

    /// These pages, kept past their TTL for `grace` to be served stale (none by
    /// default).
    pub fn with_stale(mut self, grace: StaleGrace) -> Self {
        self.grace = grace;
        self
    }

    /// The same store, its purges also sent to `edges`, if any (before they
    /// return).
    pub fn with_edges(mut self, edges: Option<crate::EdgePurger>) -> Self {
        self.edges = edges;
        self
    }

    /// Waits for the edge purges sent again in the background (before a
    /// command that purged exits: [`crate::EdgePurger::settle`]).
    pub async fn settle_edges(&self) {
        if let Some(edges) = &self.edges {
            edges.settle().await;
        }
    }

    /// How long pages are fresh.
    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// How long expired pages may still be served.
    pub fn grace(&self) -> StaleGrace {
        self.grace
    }

    /// How long an entry (and its tags' index) is kept in Redis: its TTL and grace.
    fn kept_ms(&self) -> u64 {
        (self.ttl + self.grace.keep()).as_millis() as u64
    }

    /// Reads the page stored under `key`; with `item`, only if the item ranks below
    /// the limit. The rank and the page come back in one round trip.
    pub async fn lookup(&self, key: &PageKey, item: Option<ItemId>) -> Result<Lookup, CacheError> {
        Ok(self.lookup_entry(key, item).await?.0)
    }

    /// [`PageStore::lookup`], with until when (unix ms) a found page is fresh, for
    /// a copy kept in process (never kept longer than Redis keeps it).
    pub async fn lookup_entry(
        &self,
        key: &PageKey,
        item: Option<ItemId>,
    ) -> Result<(Lookup, u64), CacheError> {
        let page_key = self.keys.page(key.as_str());
        let mut conn = self.conn.clone();
        let gate = item.zip(self.gate.as_deref());
        let known = gate.and_then(|(item, gate)| gate.top.as_ref().and_then(|top| top(item)));
        let (rank, page): (Option<u64>, Option<Vec<u8>>) = match (gate, &self.state) {
            (None, _) => (Some(0), conn.get(page_key).await?),
            (Some(_), _) if known == Some(true) => (Some(0), conn.get(page_key).await?),
            (Some((item, gate)), None) => {
                redis::pipe()
                    .cmd("ZRANK")
                    .arg(&gate.ranking)
                    .arg(item)
                    .get(page_key)
                    .query_async(&mut conn)
                    .await?
            }
            (Some((item, gate)), Some(ranking)) => {
                let mut ranking = ranking.clone();
                let mut zrank = redis::cmd("ZRANK");
                zrank.arg(&gate.ranking).arg(item);
                let (rank, page) =
                    tokio::join!(zrank.query_async(&mut ranking), conn.get(page_key));
                (rank?, page?)
            }
        };
        let limit = gate.map_or(u64::MAX, |(_, gate)| gate.limit);
        if rank.is_none_or(|r| r >= limit) {
            return Ok((Lookup::NotPopular, 0));
        }
        Ok(match page.and_then(|bytes| decode_entry(&bytes)) {
            // Stored before the state Redis lost its data: purged.
            Some(Ok(entry)) if !self.generation.holds(entry.epoch) => (Lookup::Miss, 0),
            Some(Ok(Entry {
                page, fresh_until, ..
            })) => {
                let now = now_ms();
                if now < fresh_until {
                    (Lookup::Hit(page), fresh_until)
                } else {
                    let expired = Duration::from_millis(now - fresh_until);
                    (Lookup::Stale { page, expired }, fresh_until)
                }
            }
            Some(Err(_)) => {
                tracing::warn!("unreadable cached page; rendering it again");
                (Lookup::Miss, 0)
            }
            None => (Lookup::Miss, 0),
        })
    }

    /// The fresh page stored under `key`, if any, with no popularity check (for
    /// waiters polling for a page another process is rendering).
    pub async fn get(&self, key: &PageKey) -> Result<Option<StoredPage>, CacheError> {
        Ok(self.get_entry(key).await?.map(|(page, _)| page))
    }

    /// [`PageStore::get`] with until when (unix ms) the page is fresh.
    pub async fn get_entry(&self, key: &PageKey) -> Result<Option<(StoredPage, u64)>, CacheError> {
        let bytes: Option<Vec<u8>> = redis::cmd("GET")
            .arg(self.keys.page(key.as_str()))
            .query_async(&mut self.conn.clone())
            .await?;
        Ok(bytes
            .and_then(|b| decode_entry(&b)?.ok())
            .filter(|entry| self.generation.holds(entry.epoch) && now_ms() < entry.fresh_until)
            .map(|entry| (entry.page, entry.fresh_until)))
    }

    /// Starts a render: reads the purge epoch and the generation. Call it before
    /// the render reads the database, and hand the ticket to [`PageStore::store`].
    pub async fn begin_render(&self) -> Result<RenderTicket, CacheError> {
        let began = std::time::Instant::now();
        let (epoch, since) = self.epoch(false).await?;
        Ok(RenderTicket {
            epoch,
            since,
            began,
        })
    }

    /// Stores `page` under `key` for the TTL, indexed under `tags`, unless a purge
    /// since `ticket` forbids it (see the module documentation). One round trip for
    /// the tags (one per node on a cluster), one for the page.
    pub async fn store(
        &self,
        key: &PageKey,
        page: &StoredPage,
        tags: &[PageTag],
        ticket: &RenderTicket,
    ) -> Result<Stored, CacheError> {
        if ticket.began.elapsed() > MAX_RENDER || ticket.since < self.generation.since() {
            // Too old, or begun before the state Redis lost its data.
            return Ok(Stored::Refused);
        }
        let kept = self.kept_ms();
        let mut conn = self.conn.clone();
        if !tags.is_empty() {
            let mut pipe = redis::pipe();
            for tag in tags {
                pipe.add_command(
                    self.tag_call(TAG_PAGE, tag)
                        .arg(key.as_str())
                        .arg(kept)
                        .arg(ticket.epoch)
                        .clone(),
                );
            }
            let allowed: Vec<i64> = pipe.query_async(&mut self.state()).await?;
            if allowed.contains(&0) {
                return Ok(Stored::Refused);
            }
        }
        let stored: i64 = STORE_PAGE
            .key(self.keys.page(key.as_str()))
            .arg(encode_entry(
                page,
                now_ms() + self.ttl.as_millis() as u64,
                ticket.epoch,
            ))
            .arg(kept)
            .arg(ticket.epoch)
            .invoke_async(&mut conn)
            .await?;
        if stored != 1 {
            return Ok(Stored::Refused);
        }
        // Every other server's tier drops the version it may hold.
        let event = PageEvent::Stored {
            key: key.clone(),
            by: self.origin,
        };
        self.publish(&[event]).await?;
        Ok(Stored::Yes)
    }

    /// Sends `events` to every web server's tier, in one round trip.
    async fn publish(&self, events: &[PageEvent]) -> Result<(), CacheError> {
        if events.is_empty() {
            return Ok(());
        }
        let channel = self.keys.events();
        let mut pipe = redis::pipe();
        for event in events {
            pipe.cmd("PUBLISH")
                .arg(&channel)
                .arg(event.encode())
                .ignore();
        }
        pipe.exec_async(&mut self.state()).await?;
        Ok(())
    }

    /// A call of `script` over one tag's two keys (its index and its purge mark,
    /// in one slot).
    fn tag_call(&self, script: &str, tag: &PageTag) -> redis::Cmd {
        let (index, mark) = (self.keys.tag(tag), self.keys.tag_purged(tag));
        eval(script, &[&index, &mark])
    }

    /// Purges every page showing any of `tags`, on every web server (they share
    /// this Redis) and at the edges ([`PageStore::with_edges`]): once it returns,
    /// none of those pages is served from here or there again until rendered
    /// afresh. Returns how many pages it purged. Call it after the
    /// change is committed to the database.
    pub async fn purge(&self, tags: &[PageTag]) -> Result<u64, CacheError> {
        if tags.is_empty() {
            return Ok(0);
        }
        let mut conn = self.conn.clone();
        let mut state = self.state();
        let (epoch, _) = self.epoch(true).await?;
        let mark_ttl = PURGE_MARK_TTL.as_millis() as u64;
        let mut pipe = redis::pipe();
        for tag in tags {
            pipe.add_command(
                self.tag_call(PURGE_TAG, tag)
                    .arg(epoch)
                    .arg(mark_ttl)
                    .clone(),
            );
        }
        let pages: Vec<Vec<String>> = pipe.query_async(&mut state).await?;
        let pages: std::collections::BTreeSet<String> = pages.into_iter().flatten().collect();
        let tombstone = [vec![TOMBSTONE], epoch.to_string().into_bytes()].concat();
        let hashes: Vec<&String> = pages.iter().collect();
        for chunk in hashes.chunks(PURGE_CHUNK) {
            let mut pipe = redis::pipe();
            for hash in chunk {
                pipe.add_command(
                    eval(TOMBSTONE_SCRIPT, &[&self.keys.page(hash)])
                        .arg(&tombstone)
                        .arg(epoch)
                        .arg(mark_ttl)
                        .clone(),
                )
                .ignore();
            }
            pipe.exec_async(&mut conn).await?;
        }
        // Then every web server's tier is told to drop its copies, before the purge
        // returns (each applies it as the event arrives; a tier that missed it, its
        // subscription lost, empties itself). A purge that found no page still
        // says so: copies kept in process other than pages (search results) go.
        let mut events: Vec<PageEvent> = hashes
            .chunks(PURGE_CHUNK)
            .map(|chunk| {
                PageEvent::Purged(chunk.iter().map(|hash| PageKey((*hash).clone())).collect())
            })
            .collect();
        if events.is_empty() {
            events.push(PageEvent::Purged(Vec::new()));
        }
        self.purges_seen.bump_purge();
        self.publish(&events).await?;
        // Then the edges in front: a page they keep is as stale as one here.
        if let Some(edges) = &self.edges {
            edges
                .purge(tags)
                .await
                .map_err(|error| CacheError::Source {
                    what: "edge cache purge",
                    source: Box::new(error),
                })?;
        }
        Ok(pages.len() as u64)
    }

    /// Drops the page stored under `key` (its content changed), so the next request
    /// renders it afresh.
    pub async fn remove(&self, key: &PageKey) -> Result<(), CacheError> {
        redis::cmd("DEL")
            .arg(self.keys.page(key.as_str()))
            .exec_async(&mut self.conn.clone())
            .await?;
        Ok(())
    }

    /// Tries to become the one process rendering `key`. `None`: another holds it.
    pub async fn try_lock(&self, key: &PageKey) -> Result<Option<RenderLock>, CacheError> {
        shop_cache::lock::take(&self.conn, self.keys.lock(key.as_str()), LOCK_TTL).await
    }

    /// Releases a lock this process holds (a lock that already expired is left alone).
    pub async fn unlock(&self, lock: RenderLock) -> Result<(), CacheError> {
        shop_cache::lock::release(&self.conn, lock).await
    }
}

#[cfg(test)]
mod tests;
