use redis::AsyncCommands;
use shop_cache::analytics::Rescaler;
use shop_cache::domain::ItemId;
use shop_cache::insights::{ALSO_BOUGHT_CAP, Insights};
use shop_cache::session::{SessionToken, Sessions, Touch};

use crate::{both_layouts, keys, redis};

fn item(n: u64) -> ItemId {
    ItemId::new(n).unwrap()
}

both_layouts! {
async fn a_quarter_of_the_viewers_bought_it(fx: Fixture) {
    let sessions = Sessions::new(fx.conn.clone(), fx.keys.clone());
    let insights = Insights::new(fx.conn.clone(), fx.keys.clone());
    // Fixed tokens, not random ones: HyperLogLog's estimate depends on which
    // tokens it saw, and with fresh random ones it was now and then 3 off (97 of
    // 100), outside the bounds below. The same tokens give the same estimate on
    // every run.
    let shoppers: Vec<SessionToken> = (0..100u64)
        .map(|i| format!("{:0>21}A", i * 7_919 + 12_345).parse().unwrap())
        .collect();
    for (i, s) in shoppers.iter().enumerate() {
        // Some view it twice: a shopper counts once.
        for _ in 0..(1 + i % 2) {
            sessions.touch(s, Touch::request().view(item(7))).await.unwrap();
        }
    }
    sessions.flush_views().await.unwrap();
    for s in &shoppers[..25] {
        insights.record_order(s, &[item(7)]).await.unwrap();
    }
    let got = insights.get(item(7)).await.unwrap();
    // HyperLogLog: 0.81% standard error per count, about 1.15% on the ratio, so
    // 25% is within 3 sigma at 25 +- 0.9 points; allow 2 points for small-count bias.
    let pct = got.viewed_then_bought_percent();
    assert!((pct - 25.0).abs() <= 2.0, "{pct}% from {got:?}");
    assert!(
        got.viewers.abs_diff(100) <= 2 && got.buyers.abs_diff(25) <= 1,
        "{got:?}"
    );
}

async fn also_bought_ranks_by_co_purchases(fx: Fixture) {
    let insights = Insights::new(fx.conn.clone(), fx.keys.clone());
    let (a, b, c) = (item(1), item(2), item(3));
    for order in [[a, b], [a, b], [a, c]] {
        insights
            .record_order(&SessionToken::generate(), &order)
            .await
            .unwrap();
    }
    let got = insights.get(a).await.unwrap();
    assert_eq!(got.also_bought, vec![(b, 2.0), (c, 1.0)]);
    assert_eq!(insights.get(b).await.unwrap().also_bought, vec![(a, 2.0)]);
    assert_eq!(got.buyers, 3);
    // Never bought: zeros, not an error.
    let none = insights.get(item(99)).await.unwrap();
    assert_eq!(
        (none.viewers, none.buyers, none.also_bought.len()),
        (0, 0, 0)
    );
    assert_eq!(none.viewed_then_bought_percent(), 0.0);
}

async fn the_also_bought_list_stays_at_its_cap(fx: Fixture) {
    let insights = Insights::new(fx.conn.clone(), fx.keys.clone());
    let shopper = SessionToken::generate();
    // 10,000 distinct items each bought once with item 1; a few of them often.
    for n in 2..10_002u64 {
        insights
            .record_order(&shopper, &[item(1), item(n)])
            .await
            .unwrap();
    }
    for _ in 0..3 {
        insights
            .record_order(&shopper, &[item(1), item(500)])
            .await
            .unwrap();
    }
    let size: usize = fx
        .raw()
        .await
        .zcard(fx.keys.also_bought(item(1)))
        .await
        .unwrap();
    assert_eq!(size, ALSO_BOUGHT_CAP);
    let top = insights.get(item(1)).await.unwrap().also_bought;
    assert_eq!(top.len(), 5);
    // Space-Saving: the item bought with it most often tops the list, though 10,000
    // one-off items churned through its 50 places; a score overestimates by at most
    // N/cap (N = 10,003 pairs recorded for item 1).
    assert_eq!(top[0].0, item(500), "{top:?}");
    let bound = 3.0 + 10_003.0 / ALSO_BOUGHT_CAP as f64;
    assert!(top[0].1 >= 3.0 && top[0].1 <= bound, "{top:?}");
}

async fn a_huge_order_pairs_only_its_first_items(fx: Fixture) {
    let insights = Insights::new(fx.conn.clone(), fx.keys.clone());
    let order: Vec<ItemId> = (1..=1_000).map(item).collect();
    insights
        .record_order(&SessionToken::generate(), &order)
        .await
        .unwrap();
    let stored = fx.all_keys().await;
    let lists: Vec<ItemId> = order
        .iter()
        .copied()
        .filter(|i| stored.contains(&fx.keys.also_bought(*i)))
        .collect();
    assert_eq!(lists.len(), shop_cache::insights::MAX_PAIRED_ITEMS);
    assert_eq!(lists, order[..lists.len()], "the first items of the order");
}

async fn the_rescale_decays_also_bought_counts(fx: Fixture) {
    let insights = Insights::new(fx.conn.clone(), fx.keys.clone());
    for _ in 0..4 {
        insights
            .record_order(&SessionToken::generate(), &[item(1), item(2)])
            .await
            .unwrap();
    }
    insights
        .record_order(&SessionToken::generate(), &[item(1), item(3)])
        .await
        .unwrap();
    let mut raw = fx.raw().await;
    let _: () = raw.zadd(fx.keys.item_views(), 1, -10).await.unwrap();
    let rescaler = Rescaler::new(
        fx.conn.clone(),
        fx.keys.clone(),
        std::time::Duration::from_secs(86_400),
        20_000,
    );
    rescaler.step().await.unwrap();
    assert_eq!(
        insights.get(item(1)).await.unwrap().also_bought,
        vec![(item(2), 2.0), (item(3), 0.5)]
    );
    let list: Vec<(String, f64)> = raw
        .zrange_withscores(fx.keys.also_bought(item(2)), 0, -1)
        .await
        .unwrap();
    assert_eq!(list, vec![("1".to_owned(), 2.0)]);
}

async fn a_decay_that_failed_is_finished_by_the_next_step_halving_no_list_twice(fx: Fixture) {
    // The marker used to be set before the also-bought decay: a decay that failed
    // was skipped until the next period. Now the next step finishes it.
    let insights = Insights::new(fx.conn.clone(), fx.keys.clone());
    for _ in 0..8 {
        insights
            .record_order(&SessionToken::generate(), &[item(1), item(2)])
            .await
            .unwrap();
    }
    let mut raw = fx.raw().await;
    let (one, nine) = (fx.keys.also_bought(item(1)), fx.keys.also_bought(item(9)));
    // A list the decay cannot halve (not a sorted set): the pass fails on it.
    let _: () = raw.sadd(fx.keys.also_bought_index(), 9).await.unwrap();
    let _: () = raw.set(&nine, "not a sorted set").await.unwrap();
    let rescaler = Rescaler::new(
        fx.conn.clone(),
        fx.keys.clone(),
        std::time::Duration::from_secs(86_400),
        20_000,
    );
    assert!(rescaler.step().await.is_err(), "the decay fails on also:9");

    let _: () = raw.del(&nine).await.unwrap();
    let _: () = raw.zadd(&nine, 1, 8).await.unwrap();
    // Same interval: no new rescale is due, but the unfinished decay is.
    assert_eq!(
        rescaler.step().await.unwrap(),
        shop_cache::analytics::RescaleStep::AlreadyDone
    );
    let halved: Option<f64> = raw.zscore(&nine, 1).await.unwrap();
    assert_eq!(halved, Some(4.0), "the list the failure left is halved now");
    let once: Option<f64> = raw.zscore(&one, 2).await.unwrap();
    assert_eq!(
        once,
        Some(4.0),
        "8 halved once, whether or not it was done before"
    );
    // And nothing more until the next rescale.
    rescaler.step().await.unwrap();
    let still: Option<f64> = raw.zscore(&one, 2).await.unwrap();
    assert_eq!(still, Some(4.0));
}

async fn buyers_are_counted_in_expiring_windows(fx: Fixture) {
    let insights = Insights::new(fx.conn.clone(), fx.keys.clone());
    insights
        .record_order(&SessionToken::generate(), &[item(4)])
        .await
        .unwrap();
    let window = shop_cache::insights::current_window();
    let mut raw = fx.raw().await;
    let ttl: i64 = raw.ttl(fx.keys.buyers(item(4), window)).await.unwrap();
    let max = shop_cache::insights::WINDOW_TTL.as_secs() as i64;
    assert!(ttl > max - 60 && ttl <= max, "ttl {ttl}");
    // The window before counts too (union), and older ones do not.
    let shopper = "AAAAAAAAAAAAAAAAAAAAAA";
    let _: () = redis::cmd("PFADD")
        .arg(fx.keys.buyers(item(4), window - 1))
        .arg(shopper)
        .query_async(&mut raw)
        .await
        .unwrap();
    let _: () = redis::cmd("PFADD")
        .arg(fx.keys.buyers(item(4), window - 2))
        .arg("BBBBBBBBBBBBBBBBBBBBBA")
        .query_async(&mut raw)
        .await
        .unwrap();
    assert_eq!(insights.get(item(4)).await.unwrap().buyers, 2);
}
}

/// The book layout's own legacy keys (`viewers:<item>`, no window): the cluster
/// layout never had them.

#[tokio::test]
async fn counts_of_the_old_unexpiring_layout_are_removed() {
    let (server, conn) = redis().await;
    let insights = Insights::new(conn, keys());
    let mut raw = server.conn().await;
    let window = shop_cache::insights::current_window();
    for key in [
        "viewers:1".to_owned(),
        "buyers:1".to_owned(),
        "viewers:22".to_owned(),
        format!("viewers:1:{window}"),
        format!("buyers:1:{window}"),
    ] {
        let _: () = redis::cmd("PFADD")
            .arg(&key)
            .arg("AAAAAAAAAAAAAAAAAAAAAA")
            .query_async(&mut raw)
            .await
            .unwrap();
    }
    assert_eq!(insights.remove_unwindowed_counts().await.unwrap(), 3);
    let mut left: Vec<String> = raw.keys("*").await.unwrap();
    left.sort();
    assert_eq!(
        left,
        vec![format!("buyers:1:{window}"), format!("viewers:1:{window}")]
    );
}
