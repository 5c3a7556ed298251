//! What the web servers' in-process page tiers hear (`PageEvent`s on one pub/sub
//! channel), on one node and on a cluster (where a `PUBLISH` on any node must reach a
//! subscriber on another), and the item-page touches a process holds back and
//! writes in batches.

use std::time::Duration;

use futures::StreamExt;
use redis::AsyncCommands;
use shop_cache::analytics::TopItems;
use shop_cache::domain::ItemId;
use shop_cache::session::{HISTORY_LEN, SessionToken, Sessions};
use shop_page_cache::{
    Lookup, PageEvent, PageKeys, PageRequest, PageStore, PageTag, Stored, StoredPage,
};

use crate::both_layouts;

fn item(n: u64) -> ItemId {
    ItemId::new(n).unwrap()
}

async fn next_event(stream: &mut redis::aio::PubSubStream) -> PageEvent {
    let message = tokio::time::timeout(Duration::from_secs(10), stream.next())
        .await
        .expect("an event within 10 s")
        .expect("the subscription is open");
    PageEvent::decode(message.get_payload_bytes()).expect("a page event")
}

both_layouts! {
async fn stores_and_purges_reach_a_subscriber(fx: Fixture) {
    let store = PageStore::new(fx.conn.clone(), &fx.keys, Duration::from_secs(60)).ranked(fx.keys.item_views(), 10);
    let (conn, channel) = store.events();
    let (_sink, mut stream) = conn.subscribe(&channel).await.unwrap();
    let key = PageRequest::new("/items/1", None).key();
    let page = StoredPage::new(200, vec![], b"old");
    // The first render of a new shop starts the purge bookkeeping, and says so.
    let ticket = store.begin_render().await.unwrap();
    assert_eq!(
        next_event(&mut stream).await,
        PageEvent::Generation(store.generation().since())
    );
    let tags = [PageTag::item(1)];
    assert_eq!(store.store(&key, &page, &tags, &ticket).await.unwrap(), Stored::Yes);
    assert_eq!(
        next_event(&mut stream).await,
        PageEvent::Stored { key: key.clone(), by: store.origin() }
    );
    assert_eq!(store.purge(&tags).await.unwrap(), 1);
    assert_eq!(next_event(&mut stream).await, PageEvent::Purged(vec![key.clone()]));
    // A purge that finds no page still says a purge happened (what a process keeps
    // of the catalogue besides pages, its search results, goes).
    let seen = store.purges_seen().get();
    assert_eq!(store.purge(&[PageTag::item(2)]).await.unwrap(), 0);
    assert_eq!(next_event(&mut stream).await, PageEvent::Purged(Vec::new()));
    assert_eq!(store.purges_seen().get(), seen + 1, "counted before it returned");
    let other = PageStore::new(fx.conn.clone(), &fx.keys, Duration::from_secs(60)).ranked(fx.keys.item_views(), 10);
    assert_ne!(other.origin(), store.origin(), "each process names its own stores");
    let ticket = other.begin_render().await.unwrap();
    other.store(&key, &page, &tags, &ticket).await.unwrap();
    assert_eq!(
        next_event(&mut stream).await,
        PageEvent::Stored { key, by: other.origin() },
        "nothing else before this"
    );

    // The state Redis loses the bookkeeping: the first call after it (here a purge
    // by a process that knew no generation, like `shop items update`) starts a new
    // generation and says so, so every server learns it at once.
    let _: () = redis::AsyncCommands::del(&mut fx.raw().await, PageKeys::new(&fx.keys).purges())
        .await
        .unwrap();
    let fresh = PageStore::new(fx.conn.clone(), &fx.keys, Duration::from_secs(60)).ranked(fx.keys.item_views(), 10);
    fresh.purge(&tags).await.unwrap();
    let since = fresh.generation().since();
    assert!(since > store.generation().since());
    assert_eq!(next_event(&mut stream).await, PageEvent::Generation(since));
    assert!(matches!(next_event(&mut stream).await, PageEvent::Purged(_)));
}

async fn the_gate_reads_the_process_copy_of_the_top_once_it_has_one(fx: Fixture) {
    let mut raw = fx.raw().await;
    // Items 1 and 2 are in the top 2; item 3 is not.
    let _: () = raw.zadd_multiple(fx.keys.item_views(), &[(-30, 1), (-20, 2), (-10, 3)]).await.unwrap();
    let top = TopItems::new(fx.conn.clone(), fx.keys.clone(), 2);
    let store = PageStore::new(fx.conn.clone(), &fx.keys, Duration::from_secs(60)).ranked(fx.keys.item_views(), 2)
        .with_top({
            let top = top.clone();
            move |item| top.contains(item)
        });
    let key = |n: u64| PageRequest::new(&format!("/items/{n}"), None).key();
    // Commands one lookup sends.
    let cost = async |n: u64| {
        let before = fx.conn.commands_sent();
        let found = store.lookup(&key(n), Some(item(n))).await.unwrap();
        (found, fx.conn.commands_sent() - before)
    };
    // No copy yet: the gate asks Redis (ZRANK with the GET).
    assert_eq!(top.contains(item(1)), None);
    assert_eq!(cost(1).await, (Lookup::Miss, 2));
    assert_eq!(cost(3).await, (Lookup::NotPopular, 2));
    assert_eq!(top.refresh().await.unwrap(), 2);
    assert_eq!((top.contains(item(2)), top.contains(item(3))), (Some(true), Some(false)));
    // With the copy, an item in the top costs its GET alone.
    assert_eq!(cost(1).await, (Lookup::Miss, 1));
    // Item 3 climbs to the top: not in the copy, it is asked about, and cached at once.
    let _: () = raw.zadd(fx.keys.item_views(), 3, -100).await.unwrap();
    assert_eq!(cost(3).await, (Lookup::Miss, 2));
    // Item 2 fell out: still cached until the copy is read again.
    assert_eq!(cost(2).await, (Lookup::Miss, 1));
    top.refresh().await.unwrap();
    assert_eq!(cost(2).await, (Lookup::NotPopular, 2));
    assert_eq!(cost(3).await, (Lookup::Miss, 1));
}

async fn held_touches_are_written_in_order_by_the_flush(fx: Fixture) {
    let sessions = Sessions::new(fx.conn.clone(), fx.keys.clone());
    let mut raw = fx.raw().await;
    // Forty sessions (over many shards on a cluster), each viewing items 1..=30 in
    // turn, and one request that viewed nothing.
    let tokens: Vec<SessionToken> = (0..40).map(|_| SessionToken::generate()).collect();
    for n in 1..=30 {
        for token in &tokens {
            assert!(sessions.touch_later(token, Some(item(n))));
        }
    }
    let quiet = SessionToken::generate();
    assert!(sessions.touch_later(&quiet, None));
    assert_eq!(sessions.pending_touches(), 41);
    assert_eq!(sessions.count().await.unwrap(), 0, "nothing written before the flush");
    assert_eq!(sessions.flush_views().await.unwrap(), 40 * 30);
    assert_eq!(sessions.pending_touches(), 0);
    assert_eq!(sessions.count().await.unwrap(), 41);
    let newest_first: Vec<ItemId> = (6..=30).rev().map(item).collect();
    assert_eq!(newest_first.len(), HISTORY_LEN);
    for token in &tokens {
        assert_eq!(sessions.recently_viewed(token).await.unwrap(), newest_first);
    }
    assert!(sessions.recently_viewed(&quiet).await.unwrap().is_empty());
    let count: Option<f64> = raw.zscore(fx.keys.item_views(), 7).await.unwrap();
    assert_eq!(count, Some(-40.0), "each view counted once");
    // Held again after the flush, the history goes on where it was.
    assert!(sessions.touch_later(&tokens[0], Some(item(31))));
    sessions.flush_views().await.unwrap();
    assert_eq!(sessions.recently_viewed(&tokens[0]).await.unwrap()[0], item(31));
}
}

both_layouts! {
async fn a_flush_writes_a_large_batch_of_viewers_in_parts(fx: Fixture) {
    // More viewers of one item than one script call takes at once (as a batch
    // that grew while Redis was away), and many items (more than one call's).
    let sessions = Sessions::new(fx.conn.clone(), fx.keys.clone());
    let tokens: Vec<SessionToken> = (0..12_000u64)
        .map(|i| format!("{:0>21}A", i * 7_919 + 12_345).parse().unwrap())
        .collect();
    for token in &tokens {
        assert!(sessions.touch_later(token, Some(item(1))));
    }
    for n in 2..=1_200 {
        assert!(sessions.touch_later(&tokens[n as usize], Some(item(n))));
    }
    assert_eq!(sessions.flush_views().await.unwrap(), 12_000 + 1_199);
    let mut raw = fx.raw().await;
    let window = shop_cache::insights::current_window();
    let distinct: u64 = redis::cmd("PFCOUNT")
        .arg(fx.keys.viewers(item(1), window))
        .query_async(&mut raw)
        .await
        .unwrap();
    assert!((11_600..=12_400).contains(&distinct), "{distinct}");
    let ttl: i64 = raw.ttl(fx.keys.viewers(item(1), window)).await.unwrap();
    assert!(ttl > 0, "the new key got its lifetime");
    let ranked: u64 = raw.zcard(fx.keys.item_views()).await.unwrap();
    assert_eq!(ranked, 1_200);
    let count: Option<f64> = raw.zscore(fx.keys.item_views(), 1).await.unwrap();
    assert_eq!(count, Some(-12_000.0));
}
}
