//! The page cache's Redis side: pages read with their item's rank, stored with a
//! TTL, removed, and the render lock that lets one process render a missing page.

use std::time::Duration;

use redis::AsyncCommands;
use shop_cache::domain::ItemId;
use shop_page_cache::{
    LOCK_TTL, Lookup, PageKey, PageKeys, PageRequest, PageStore, PageTag, StaleGrace, Stored,
    StoredPage,
};

use crate::{Fixture, both_layouts};

fn item(n: u64) -> ItemId {
    ItemId::new(n).unwrap()
}

fn page(body: &str) -> StoredPage {
    StoredPage::new(
        200,
        vec![("content-type".into(), b"text/html; charset=utf-8".to_vec())],
        body.as_bytes(),
    )
}

fn key_of(path: &str) -> PageKey {
    PageRequest::new(path, None).key()
}

/// Stores `page` untagged, as a render that began just now, and checks it stuck.
async fn put(store: &PageStore, key: &PageKey, page: &StoredPage) {
    let ticket = store.begin_render().await.unwrap();
    assert_eq!(
        store.store(key, page, &[], &ticket).await.unwrap(),
        Stored::Yes
    );
}

/// The store under test: pages kept `ttl`, items ranked below `rank_limit` cached.
fn store_of(fx: &Fixture, ttl: Duration, rank_limit: u64) -> PageStore {
    PageStore::new(fx.conn.clone(), &fx.keys, ttl).ranked(fx.keys.item_views(), rank_limit)
}

/// Items 1..=n ranked by views: item 1 the most viewed (rank 0), item n the least.
async fn rank_items(fx: &Fixture, n: u64) {
    let members: Vec<(f64, u64)> = (1..=n).map(|i| (i as f64 - n as f64 - 1.0, i)).collect();
    let _: () = fx
        .raw()
        .await
        .zadd_multiple(fx.keys.item_views(), &members)
        .await
        .unwrap();
}

both_layouts! {
async fn lookup_caches_only_items_ranked_below_the_limit(fx: Fixture) {
    let store = store_of(&fx, Duration::from_secs(60), 2);
    rank_items(&fx, 3).await;
    let (one, three, unseen) = (key_of("/items/1"), key_of("/items/3"), key_of("/items/9"));
    // Ranks 0 and 1 are within a limit of 2; rank 2 and an item nobody viewed are not.
    assert_eq!(
        store.lookup(&one, Some(item(1))).await.unwrap(),
        Lookup::Miss
    );
    assert_eq!(
        store.lookup(&three, Some(item(3))).await.unwrap(),
        Lookup::NotPopular
    );
    assert_eq!(
        store.lookup(&unseen, Some(item(9))).await.unwrap(),
        Lookup::NotPopular
    );

    // A stored page is a hit only while its item ranks.
    put(&store, &one, &page("one")).await;
    put(&store, &three, &page("three")).await;
    assert_eq!(
        store.lookup(&one, Some(item(1))).await.unwrap(),
        Lookup::Hit(page("one"))
    );
    assert_eq!(
        store.lookup(&three, Some(item(3))).await.unwrap(),
        Lookup::NotPopular,
        "stored, but its item is not among the most viewed"
    );
    // The ranking moves: item 3 climbs to rank 0, its page is served.
    let _: () = fx
        .raw()
        .await
        .zadd(fx.keys.item_views(), 3, -100)
        .await
        .unwrap();
    assert_eq!(
        store.lookup(&three, Some(item(3))).await.unwrap(),
        Lookup::Hit(page("three"))
    );
    // A page that is no item's skips the ranking.
    assert_eq!(store.lookup(&unseen, None).await.unwrap(), Lookup::Miss);
    let cart = key_of("/cart");
    put(&store, &cart, &page("cart")).await;
    assert_eq!(
        store.lookup(&cart, None).await.unwrap(),
        Lookup::Hit(page("cart"))
    );
}

async fn lookup_follows_the_ranking_that_touch_records(fx: Fixture) {
    // The ranking as the sessions write it (batched per process on a cluster).
    let sessions = shop_cache::session::Sessions::new(fx.conn.clone(), fx.keys.clone());
    let t = shop_cache::session::SessionToken::generate();
    let store = store_of(&fx, Duration::from_secs(60), 1);
    let key = key_of("/items/5");
    put(&store, &key, &page("five")).await;
    assert_eq!(
        store.lookup(&key, Some(item(5))).await.unwrap(),
        Lookup::NotPopular
    );
    sessions.touch(&t, shop_cache::session::Touch::request().view(item(5))).await.unwrap();
    sessions.flush_views().await.unwrap();
    assert_eq!(
        store.lookup(&key, Some(item(5))).await.unwrap(),
        Lookup::Hit(page("five"))
    );
}

async fn pages_are_stored_with_the_ttl_and_expire(fx: Fixture) {
    let store = store_of(&fx, Duration::from_secs(300), 10);
    assert_eq!(store.ttl(), Duration::from_secs(300));
    let key = key_of("/items/1");
    assert_eq!(store.get(&key).await.unwrap(), None);
    let body = "<p>A fine item.</p>".repeat(100);
    put(&store, &key, &page(&body)).await;
    let got = store.get(&key).await.unwrap().expect("stored");
    assert_eq!(got, page(&body));
    assert_eq!(got.body().unwrap(), body.as_bytes());

    let mut raw = fx.raw().await;
    // The page, and the purge epoch and generation its render read (started then).
    let mut expected = vec![PageKeys::new(&fx.keys).page(key.as_str()), PageKeys::new(&fx.keys).purges()];
    expected.sort();
    assert_eq!(fx.all_keys().await, expected);
    let pttl: i64 = raw.pttl(PageKeys::new(&fx.keys).page(key.as_str())).await.unwrap();
    assert!(pttl > 299_000 && pttl <= 300_000, "pttl {pttl}");
    // Storing again replaces the page and starts the TTL afresh.
    let _: () = raw
        .pexpire(PageKeys::new(&fx.keys).page(key.as_str()), 1_000)
        .await
        .unwrap();
    put(&store, &key, &page("new")).await;
    assert_eq!(store.get(&key).await.unwrap(), Some(page("new")));
    let pttl: i64 = raw.pttl(PageKeys::new(&fx.keys).page(key.as_str())).await.unwrap();
    assert!(pttl > 299_000, "pttl {pttl}");

    // A short TTL: gone once it passes.
    let brief = store_of(&fx, Duration::from_millis(200), 10);
    let other = key_of("/items/2");
    put(&brief, &other, &page("brief")).await;
    assert!(brief.get(&other).await.unwrap().is_some());
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(brief.get(&other).await.unwrap(), None);
    assert_eq!(brief.lookup(&other, None).await.unwrap(), Lookup::Miss);
}

async fn different_requests_are_different_pages(fx: Fixture) {
    let store = store_of(&fx, Duration::from_secs(60), 10);
    let en = PageRequest::new("/items/1", Some("b=2&a=1")).vary_on("accept-language", b"en");
    let same = PageRequest::new("/items/1", Some("a=1&b=2")).vary_on("Accept-Language", b"en");
    let de = PageRequest::new("/items/1", Some("a=1&b=2")).vary_on("accept-language", b"de");
    put(&store, &en.key(), &page("english")).await;
    put(&store, &de.key(), &page("deutsch")).await;
    assert_eq!(store.get(&same.key()).await.unwrap(), Some(page("english")));
    assert_eq!(store.get(&de.key()).await.unwrap(), Some(page("deutsch")));
    let mut expected = vec![
        PageKeys::new(&fx.keys).page(en.key().as_str()),
        PageKeys::new(&fx.keys).page(de.key().as_str()),
        PageKeys::new(&fx.keys).purges(),
    ];
    expected.sort();
    assert_eq!(fx.all_keys().await, expected);
}

async fn an_unreadable_page_is_a_miss(fx: Fixture) {
    let store = store_of(&fx, Duration::from_secs(60), 10);
    let key = key_of("/items/1");
    let _: () = fx
        .raw()
        .await
        .set(PageKeys::new(&fx.keys).page(key.as_str()), "not a stored page")
        .await
        .unwrap();
    assert_eq!(store.lookup(&key, None).await.unwrap(), Lookup::Miss);
    assert_eq!(store.get(&key).await.unwrap(), None);
    // Rendering it again replaces it.
    put(&store, &key, &page("fresh")).await;
    assert_eq!(
        store.lookup(&key, None).await.unwrap(),
        Lookup::Hit(page("fresh"))
    );
}

async fn remove_drops_the_page(fx: Fixture) {
    let store = store_of(&fx, Duration::from_secs(60), 10);
    rank_items(&fx, 1).await;
    let (key, other) = (key_of("/items/1"), key_of("/items/2"));
    put(&store, &key, &page("one")).await;
    put(&store, &other, &page("two")).await;
    store.remove(&key).await.unwrap();
    assert_eq!(store.get(&key).await.unwrap(), None);
    assert_eq!(
        store.lookup(&key, Some(item(1))).await.unwrap(),
        Lookup::Miss
    );
    assert_eq!(
        store.get(&other).await.unwrap(),
        Some(page("two")),
        "only that page"
    );
    // Removing what is not there is no error.
    store.remove(&key).await.unwrap();
    let mut expected = vec![
        fx.keys.item_views().to_owned(),
        PageKeys::new(&fx.keys).page(other.as_str()),
        PageKeys::new(&fx.keys).purges(),
    ];
    expected.sort();
    assert_eq!(fx.all_keys().await, expected);
}

async fn a_lost_state_redis_starts_a_generation_that_purges_everything_before(fx: Fixture) {
    let store = store_of(&fx, Duration::from_secs(60), 10);
    let other = store_of(&fx, Duration::from_secs(60), 10);
    let key = key_of("/items/1");
    put(&store, &key, &page("old")).await;
    let late = store.begin_render().await.unwrap();
    assert_eq!(store.get(&key).await.unwrap(), Some(page("old")));
    let mut raw = fx.raw().await;
    let before: u64 = raw.hget(PageKeys::new(&fx.keys).purges(), "epoch").await.unwrap();
    let since = store.generation().since();
    // The bookkeeping is lost (a flush, a restart without its file); the page is not.
    let _: () = raw.del(PageKeys::new(&fx.keys).purges()).await.unwrap();
    // A purge by another process finds no tag, and starts the next generation.
    assert_eq!(other.purge(&[PageTag::item(1)]).await.unwrap(), 0);
    let after: u64 = raw.hget(PageKeys::new(&fx.keys).purges(), "epoch").await.unwrap();
    assert!(after > before, "the epoch never goes back: {after} after {before}");
    assert!(other.generation().since() > since);
    assert_eq!(other.get(&key).await.unwrap(), None, "stored before: purged");
    // This process learns it at its next render (or from the event, or its tier's
    // check): its render begun before is not stored, and the old page is gone.
    let ticket = store.begin_render().await.unwrap();
    assert_eq!(store.generation().since(), other.generation().since());
    assert_eq!(store.get(&key).await.unwrap(), None);
    assert_eq!(store.lookup(&key, None).await.unwrap(), Lookup::Miss);
    assert_eq!(
        store.store(&key, &page("late"), &[], &late).await.unwrap(),
        Stored::Refused,
        "a render begun before the loss"
    );
    assert_eq!(
        store.store(&key, &page("new"), &[], &ticket).await.unwrap(),
        Stored::Yes
    );
    assert_eq!(other.get(&key).await.unwrap(), Some(page("new")));
}

async fn one_process_holds_the_render_lock_at_a_time(fx: Fixture) {
    let store = store_of(&fx, Duration::from_secs(60), 10);
    // Another process: its own connection.
    let elsewhere =
        PageStore::new(fx.raw().await, &fx.keys, Duration::from_secs(60)).ranked(fx.keys.item_views(), 10);
    let key = key_of("/items/1");
    let lock = store.try_lock(&key).await.unwrap().expect("free: taken");
    assert!(elsewhere.try_lock(&key).await.unwrap().is_none(), "held");
    assert!(
        store.try_lock(&key).await.unwrap().is_none(),
        "held, even here"
    );
    // Locks of other pages are independent.
    let other = elsewhere
        .try_lock(&key_of("/items/2"))
        .await
        .unwrap()
        .expect("another page's lock is free");

    // The lock expires by itself if its holder dies.
    let mut raw = fx.raw().await;
    let pttl: i64 = raw.pttl(PageKeys::new(&fx.keys).lock(key.as_str())).await.unwrap();
    let max = LOCK_TTL.as_millis() as i64;
    assert!(pttl > max - 1_000 && pttl <= max, "pttl {pttl}");

    store.unlock(lock).await.unwrap();
    let again = elsewhere
        .try_lock(&key)
        .await
        .unwrap()
        .expect("released: free again");
    elsewhere.unlock(again).await.unwrap();
    elsewhere.unlock(other).await.unwrap();
    assert!(fx.all_keys().await.is_empty(), "no lock left behind");
}

async fn an_expired_lock_taken_by_another_is_not_released_by_the_first(fx: Fixture) {
    let store = store_of(&fx, Duration::from_secs(60), 10);
    let key = key_of("/items/1");
    let first = store.try_lock(&key).await.unwrap().unwrap();
    // The first holder stalls past the lock's life (its expiry, made to happen now).
    let mut raw = fx.raw().await;
    let lock_key = PageKeys::new(&fx.keys).lock(key.as_str());
    let _: () = raw.del(&lock_key).await.unwrap();
    let second = store.try_lock(&key).await.unwrap().expect("expired: free");
    // The first one finishes and unlocks: the second's lock must stay.
    store.unlock(first).await.unwrap();
    let held: bool = raw.exists(&lock_key).await.unwrap();
    assert!(held, "the second holder's lock was released by the first");
    assert!(store.try_lock(&key).await.unwrap().is_none());
    store.unlock(second).await.unwrap();
    let held: bool = raw.exists(&lock_key).await.unwrap();
    assert!(!held);
}
}

both_layouts! {
async fn a_purge_removes_every_page_of_its_tags_and_no_other(fx: Fixture) {
    let store = store_of(&fx, Duration::from_secs(60), 10);
    let kitchen = PageTag::new("dkitchen & bath, ÜBER {x}");
    let (item_page, listing, other) = (key_of("/items/1"), key_of("/c/kitchen"), key_of("/items/2"));
    let ticket = store.begin_render().await.unwrap();
    for (key, tags) in [
        (&item_page, vec![PageTag::item(1)]),
        (&listing, vec![PageTag::item(1), PageTag::item(2), kitchen.clone()]),
        (&other, vec![PageTag::item(2)]),
    ] {
        assert_eq!(store.store(key, &page("old"), &tags, &ticket).await.unwrap(), Stored::Yes);
    }
    assert_eq!(store.purge(&[PageTag::item(1)]).await.unwrap(), 2);
    assert_eq!(store.lookup(&item_page, None).await.unwrap(), Lookup::Miss);
    assert_eq!(store.get(&listing).await.unwrap(), None);
    assert_eq!(store.get(&other).await.unwrap(), Some(page("old")));
    // The index keeps its entries until their pages' time is up, so a purge done
    // again (after its tombstones failed, say) finds them again; a department's
    // purge reaches its listing.
    assert_eq!(store.purge(&[PageTag::item(1)]).await.unwrap(), 2);
    assert_eq!(store.get(&listing).await.unwrap(), None);
    let ticket = store.begin_render().await.unwrap();
    store.store(&listing, &page("new"), std::slice::from_ref(&kitchen), &ticket).await.unwrap();
    assert_eq!(store.purge(&[kitchen]).await.unwrap(), 1);
    assert_eq!(store.get(&listing).await.unwrap(), None);
}

async fn a_render_that_began_before_a_purge_is_not_stored(fx: Fixture) {
    let store = store_of(&fx, Duration::from_secs(60), 10);
    let key = key_of("/items/1");
    let tags = [PageTag::item(1)];
    // The render read the epoch (and then the database) before the change...
    let before = store.begin_render().await.unwrap();
    // ... the change committed and purged (nothing of it stored yet) ...
    store.purge(&tags).await.unwrap();
    // ... so its page may be old: refused by the tag's purge mark.
    assert_eq!(store.store(&key, &page("old"), &tags, &before).await.unwrap(), Stored::Refused);
    assert_eq!(store.get(&key).await.unwrap(), None);

    // A page stored, then purged: the tombstone refuses a store from before the
    // purge even without tags (the order where the purge ran between the tag
    // index and the store).
    let ticket = store.begin_render().await.unwrap();
    store.store(&key, &page("v1"), &tags, &ticket).await.unwrap();
    store.purge(&tags).await.unwrap();
    assert_eq!(store.store(&key, &page("v1"), &[], &ticket).await.unwrap(), Stored::Refused);
    assert_eq!(store.lookup(&key, None).await.unwrap(), Lookup::Miss);

    // A render that began after the purge stores, over the tombstone.
    let after = store.begin_render().await.unwrap();
    assert_eq!(store.store(&key, &page("v2"), &tags, &after).await.unwrap(), Stored::Yes);
    assert_eq!(store.get(&key).await.unwrap(), Some(page("v2")));
}

async fn the_tag_index_expires_with_its_pages(fx: Fixture) {
    let store = store_of(&fx, Duration::from_secs(60), 10);
    let ticket = store.begin_render().await.unwrap();
    let tags = [PageTag::item(7), PageTag::new("all")];
    store.store(&key_of("/items"), &page("x"), &tags, &ticket).await.unwrap();
    let mut raw = fx.raw().await;
    for tag in &tags {
        let ttl: i64 = raw.pttl(PageKeys::new(&fx.keys).tag(tag)).await.unwrap();
        assert!((1..=60_000).contains(&ttl), "{tag:?}: {ttl}");
    }
    // The purge's marks are kept a minute, then go.
    store.purge(&tags).await.unwrap();
    let mark: i64 = raw.pttl(PageKeys::new(&fx.keys).tag_purged(&PageTag::item(7))).await.unwrap();
    assert!((1..=60_000).contains(&mark), "{mark}");
    let indexed: Vec<String> = raw
        .zrange(PageKeys::new(&fx.keys).tag(&PageTag::item(7)), 0, -1)
        .await
        .unwrap();
    assert_eq!(indexed, [key_of("/items").as_str()], "kept for a retry");
    let tomb: i64 = raw.pttl(PageKeys::new(&fx.keys).page(key_of("/items").as_str())).await.unwrap();
    assert!((1..=60_000).contains(&tomb), "{tomb}");
}

async fn an_expired_page_is_stale_within_its_grace_and_a_purge_reaches_it(fx: Fixture) {
    let grace = StaleGrace {
        while_revalidate: Duration::from_secs(30),
        if_error: Duration::from_secs(60),
    };
    let store = store_of(&fx, Duration::from_secs(1), 10).with_stale(grace);
    let key = key_of("/items/1");
    let tags = [PageTag::item(1)];
    let ticket = store.begin_render().await.unwrap();
    store.store(&key, &page("one"), &tags, &ticket).await.unwrap();
    // Kept (and indexed) for its TTL and the longer grace.
    let mut raw = fx.raw().await;
    let kept: i64 = raw.pttl(PageKeys::new(&fx.keys).page(key.as_str())).await.unwrap();
    assert!((60_000..=61_000).contains(&kept), "{kept}");
    let indexed: i64 = raw.pttl(PageKeys::new(&fx.keys).tag(&PageTag::item(1))).await.unwrap();
    assert!((60_000..=61_000).contains(&indexed), "{indexed}");
    assert_eq!(store.lookup(&key, None).await.unwrap(), Lookup::Hit(page("one")));
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        match store.lookup(&key, None).await.unwrap() {
            Lookup::Hit(_) => {}
            Lookup::Stale { page: stale, expired } => {
                assert_eq!(stale, page("one"));
                assert!(expired < Duration::from_secs(10), "{expired:?}");
                break;
            }
            other => panic!("{other:?}"),
        }
        assert!(std::time::Instant::now() < deadline, "never expired");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Waiters want a fresh page, not the stale copy.
    assert_eq!(store.get(&key).await.unwrap(), None);
    // A purge removes stale copies too.
    assert_eq!(store.purge(&tags).await.unwrap(), 1);
    assert_eq!(store.lookup(&key, None).await.unwrap(), Lookup::Miss);
}
}

/// The two-Redis shape: pages in a cache Redis with a memory limit that evicts,
/// sessions and carts in the state Redis. Filling the cache far past its limit
/// evicts pages only; every session and cart stays, and the rank gate still
/// reads the ranking from the state Redis.
#[tokio::test]
async fn a_full_cache_redis_evicts_pages_and_never_a_session_or_cart() {
    use shop_cache::cart::Carts;
    use shop_cache::session::{SessionToken, Sessions, Touch};
    use shop_testkit::TestRedis;

    let state_server = TestRedis::start();
    let cache_server = TestRedis::start();
    let mut cache_raw = cache_server.conn().await;
    for (name, value) in [("maxmemory", "2mb"), ("maxmemory-policy", "allkeys-lru")] {
        let _: () = redis::cmd("CONFIG")
            .arg("SET")
            .arg(name)
            .arg(value)
            .query_async(&mut cache_raw)
            .await
            .unwrap();
    }
    let keys = shop_cache::keys::Keys::default();
    let state = shop_cache::connect(&state_server.url()).await.unwrap();
    let cache = shop_cache::connect(&cache_server.url()).await.unwrap();
    let sessions = Sessions::new(state.clone(), keys.clone());
    let carts = Carts::new(state.clone(), keys.clone(), 99);
    let shoppers: Vec<SessionToken> = (0..300).map(|_| SessionToken::generate()).collect();
    for (n, t) in shoppers.iter().enumerate() {
        sessions
            .touch(t, Touch::request().view(item(1)))
            .await
            .unwrap();
        carts.set(t, item(n as u64 % 50 + 1), 2).await.unwrap();
    }
    sessions.flush_views().await.unwrap();
    let store =
        PageStore::in_cache_or_state(Some(cache), state.clone(), &keys, Duration::from_secs(300))
            .ranked(keys.item_views(), 10_000);

    // 4,000 pages of 4 KB that do not compress: about 16 MB into a 2 MB cache.
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    for n in 0..4_000 {
        let body: String = (0..4_096)
            .map(|_| {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                char::from(b'!' + (seed % 90) as u8)
            })
            .collect();
        let ticket = store.begin_render().await.unwrap();
        store
            .store(
                &key_of(&format!("/p/{n}")),
                &page(&body),
                &[PageTag::item(1)],
                &ticket,
            )
            .await
            .unwrap();
    }
    let info: String = redis::cmd("INFO")
        .arg("memory")
        .query_async(&mut cache_raw)
        .await
        .unwrap();
    let used: u64 = info
        .lines()
        .find_map(|l| l.strip_prefix("used_memory:"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(
        used <= 3 << 20,
        "the cache Redis stays near its limit: {used} bytes"
    );
    let stats: String = redis::cmd("INFO")
        .arg("stats")
        .query_async(&mut cache_raw)
        .await
        .unwrap();
    let evicted: u64 = stats
        .lines()
        .find_map(|l| l.strip_prefix("evicted_keys:"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(evicted > 1_000, "pages were evicted: {evicted}");

    // Every shopper is still there, cart and all; the state Redis evicted nothing.
    for (n, t) in shoppers.iter().enumerate() {
        let lines = carts.get(t).await.unwrap();
        assert_eq!(lines.len(), 1, "shopper {n} lost the cart");
        assert_eq!(sessions.recently_viewed(t).await.unwrap(), vec![item(1)]);
    }
    assert_eq!(sessions.count().await.unwrap(), 300);

    // The newest page is served; the gate reads item 1's rank from the state Redis.
    let ticket = store.begin_render().await.unwrap();
    let last = key_of("/items/1");
    store
        .store(&last, &page("item one"), &[], &ticket)
        .await
        .unwrap();
    assert!(matches!(
        store.lookup(&last, Some(item(1))).await.unwrap(),
        Lookup::Hit(_)
    ));
    assert!(matches!(
        store.lookup(&last, Some(item(2))).await.unwrap(),
        Lookup::NotPopular
    ));
}
