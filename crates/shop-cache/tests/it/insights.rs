use redis::AsyncCommands;
use shop_cache::domain::ItemId;
use shop_cache::insights::{ALSO_BOUGHT_CAP, HALF_LIFE, Insights, weight_at};
use shop_cache::session::{SessionToken, Sessions, Touch};

use crate::{both_layouts, keys, redis};

fn unix_now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

fn item(n: u64) -> ItemId {
    ItemId::new(n).unwrap()
}

/// Records `n` orders of `items`, each by a new shopper, at `at` (unix seconds).
async fn orders(insights: &Insights, n: usize, items: &[ItemId], at: f64) {
    for _ in 0..n {
        insights
            .record_order_at(&SessionToken::generate(), items, at)
            .await
            .unwrap();
    }
}

/// Equal to a thousandth (counts read a moment after they were written have
/// decayed by a few millionths a second).
fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-3 * b.abs().max(1.0)
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

async fn a_best_seller_does_not_crowd_out_a_pair_bought_together(fx: Fixture) {
    let insights = Insights::new(fx.conn.clone(), fx.keys.clone());
    let now = unix_now();
    // 100 orders. The best seller (1) is in 60 of them; item 2 is in 20: 12 with
    // the best seller (as often as its popularity predicts: 20 * 60 / 100) and 8
    // with item 3, which only 9 orders hold (predicted: 20 * 9 / 100 = 1.8).
    let (best, x, y) = (item(1), item(2), item(3));
    orders(&insights, 12, &[x, best], now).await;
    orders(&insights, 8, &[x, y], now).await;
    orders(&insights, 1, &[y], now).await;
    orders(&insights, 48, &[best], now).await;
    for n in 0..31 {
        orders(&insights, 1, &[item(50 + n)], now).await;
    }
    // Raw counts, as stored, put the best seller first (12 against 8) ...
    let raw: Vec<(String, f64)> = fx
        .raw()
        .await
        .zrevrange_withscores(fx.keys.also_bought(x), 0, -1)
        .await
        .unwrap();
    assert_eq!(raw[0].0, "1", "{raw:?}");
    // ... the score shows only the pair bought together beyond popularity.
    let got = insights.get(x).await.unwrap();
    let shown: Vec<ItemId> = got.also_bought.iter().map(|a| a.item).collect();
    assert_eq!(shown, vec![y], "{got:?}");
    let pair = &got.also_bought[0];
    assert!(close(pair.co_buyers, 8.0) && close(pair.expected, 1.8), "{pair:?}");
    assert!(close(pair.score, (8.0 - 1.8) / 1.8f64.sqrt()), "{pair:?}");
    // And nothing beside the best seller: item 2 is bought with it only as often
    // as chance predicts.
    assert_eq!(insights.get(best).await.unwrap().also_bought, vec![]);
    // Buyers are counted in a HyperLogLog of the 20 random session tokens: two
    // may share a register (about one run in a hundred), as in the test above.
    assert!(got.buyers.abs_diff(20) <= 1, "{got:?}");
    // Never bought: zeros, not an error.
    let none = insights.get(item(99)).await.unwrap();
    assert_eq!(
        (none.viewers, none.buyers, none.also_bought.len()),
        (0, 0, 0)
    );
    assert_eq!(none.viewed_then_bought_percent(), 0.0);
}

async fn the_minimum_of_co_buyers_hides_chance_pairs(fx: Fixture) {
    let insights = Insights::new(fx.conn.clone(), fx.keys.clone());
    let now = unix_now();
    // Two orders hold items 2 and 4, and item 4 is in no other: by popularity
    // alone a striking pair, on the evidence of two orders.
    orders(&insights, 2, &[item(2), item(4)], now).await;
    for n in 0..50 {
        orders(&insights, 1, &[item(100 + n)], now).await;
    }
    assert_eq!(insights.get(item(2)).await.unwrap().also_bought, vec![]);
    let two = insights.clone().with_min_co_buyers(2);
    let shown: Vec<ItemId> = two
        .get(item(2))
        .await
        .unwrap()
        .also_bought
        .iter()
        .map(|a| a.item)
        .collect();
    assert_eq!(shown, vec![item(4)]);
    // A third order reaches the default minimum.
    orders(&insights, 1, &[item(2), item(4)], now).await;
    let got = insights.get(item(2)).await.unwrap().also_bought;
    assert_eq!(got.len(), 1, "{got:?}");
    assert!(close(got[0].co_buyers, 3.0), "{got:?}");
}

async fn an_order_a_half_life_old_counts_half(fx: Fixture) {
    let insights = Insights::new(fx.conn.clone(), fx.keys.clone()).with_min_co_buyers(1);
    let now = unix_now();
    let then = now - HALF_LIFE.as_secs_f64();
    orders(&insights, 4, &[item(1), item(2)], then).await;
    orders(&insights, 4, &[item(1), item(3)], now).await;
    for n in 0..40 {
        orders(&insights, 1, &[item(100 + n)], now).await;
    }
    let got = insights.get(item(1)).await.unwrap().also_bought;
    let seen: Vec<(ItemId, f64)> = got.iter().map(|a| (a.item, a.co_buyers)).collect();
    assert_eq!(seen.len(), 2, "{seen:?}");
    assert_eq!((seen[0].0, seen[1].0), (item(3), item(2)), "{seen:?}");
    assert!(close(seen[0].1, 4.0) && close(seen[1].1, 2.0), "{seen:?}");
    // Nothing was rewritten: the old orders simply weigh less than new ones.
    let stored: Option<f64> = fx.raw().await.zscore(fx.keys.also_bought(item(1)), 2).await.unwrap();
    assert!(close(stored.unwrap() / weight_at(then), 4.0), "{stored:?}");
}

async fn the_also_bought_list_stays_at_its_cap_and_counts_no_more_than_the_truth(fx: Fixture) {
    let insights = Insights::new(fx.conn.clone(), fx.keys.clone());
    let shopper = SessionToken::generate();
    let now = unix_now();
    // 10,000 distinct items each bought once with item 1; then item 500 three more
    // times.
    for n in 2..10_002u64 {
        insights
            .record_order_at(&shopper, &[item(1), item(n)], now)
            .await
            .unwrap();
    }
    orders(&insights, 3, &[item(1), item(500)], now).await;
    let mut raw = fx.raw().await;
    let size: usize = raw.zcard(fx.keys.also_bought(item(1))).await.unwrap();
    assert_eq!(size, ALSO_BOUGHT_CAP);
    // Item 500 churned out of the list and came back: it counts the orders since,
    // 3 of its 4, never a count it did not earn.
    let count: f64 = raw.zscore(fx.keys.also_bought(item(1)), 500).await.unwrap();
    assert!(close(count / weight_at(now), 3.0), "{count}");
    // And item 1 holds it no more often than item 500's popularity predicts
    // (10,003 orders of item 1 out of 10,003, 4 of item 500): not recommended.
    assert_eq!(insights.get(item(1)).await.unwrap().also_bought, vec![]);
}

async fn a_full_list_makes_room_from_what_stopped_selling(fx: Fixture) {
    let insights = Insights::new(fx.conn.clone(), fx.keys.clone());
    let now = unix_now();
    let then = now - 3.0 * HALF_LIFE.as_secs_f64();
    // Six weeks ago item 1 was bought twice with each of 100 items: a full list,
    // each count 2 then and a quarter of an order now.
    for n in 2..(2 + ALSO_BOUGHT_CAP as u64) {
        orders(&insights, 2, &[item(1), item(n)], then).await;
    }
    // Today, items 500 and 501 are bought with it once each: each takes the place
    // of an old pair, not of the other.
    orders(&insights, 1, &[item(1), item(500)], now).await;
    orders(&insights, 1, &[item(1), item(501)], now).await;
    let mut raw = fx.raw().await;
    let list = fx.keys.also_bought(item(1));
    let size: usize = raw.zcard(&list).await.unwrap();
    assert_eq!(size, ALSO_BOUGHT_CAP);
    for n in [500, 501] {
        let count: Option<f64> = raw.zscore(&list, n).await.unwrap();
        assert!(close(count.unwrap() / weight_at(now), 1.0), "{n}: {count:?}");
    }
}

async fn an_orders_newcomers_all_come_into_a_full_list(fx: Fixture) {
    let insights = Insights::new(fx.conn.clone(), fx.keys.clone());
    let now = unix_now();
    let then = now - 3.0 * HALF_LIFE.as_secs_f64();
    for n in 2..(2 + ALSO_BOUGHT_CAP as u64) {
        orders(&insights, 1, &[item(1), item(n)], then).await;
    }
    // One order brings three items new to item 1's full list: none pushes out
    // another of the same order.
    orders(&insights, 1, &[item(1), item(500), item(501), item(502)], now).await;
    let mut raw = fx.raw().await;
    let list = fx.keys.also_bought(item(1));
    let size: usize = raw.zcard(&list).await.unwrap();
    assert_eq!(size, ALSO_BOUGHT_CAP);
    for n in [500, 501, 502] {
        let count: Option<f64> = raw.zscore(&list, n).await.unwrap();
        assert!(count.is_some_and(|c| close(c / weight_at(now), 1.0)), "{n}: {count:?}");
    }
}

async fn an_order_whose_popularity_cannot_be_written_writes_no_pairs(fx: Fixture) {
    let insights = Insights::new(fx.conn.clone(), fx.keys.clone());
    let mut raw = fx.raw().await;
    // Something else holds the count of orders: the popularity write fails.
    let _: () = raw.hset(fx.keys.orders(), "not", "a number").await.unwrap();
    let failed = insights
        .record_order(&SessionToken::generate(), &[item(1), item(2)])
        .await;
    assert!(failed.is_err());
    // No pair was counted without the popularity it is judged against.
    let lists: usize = raw.exists(&[fx.keys.also_bought(item(1)), fx.keys.also_bought(item(2))]).await.unwrap();
    assert_eq!(lists, 0);
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

async fn the_old_also_bought_decay_keys_are_removed(fx: Fixture) {
    let insights = Insights::new(fx.conn.clone(), fx.keys.clone());
    let mut raw = fx.raw().await;
    let [epoch, decayed, index] = fx.keys.old_also_bought_decay();
    let _: () = raw.set(&epoch, 7).await.unwrap();
    let _: () = raw.set(&decayed, 6).await.unwrap();
    let _: () = raw.sadd(&index, &[1, 2]).await.unwrap();
    for n in [1, 2] {
        let _: () = raw
            .hset(fx.keys.old_also_bought_marks(item(n)), n, 6)
            .await
            .unwrap();
        let _: () = raw.zadd(fx.keys.also_bought(item(n)), 3 - n, 5).await.unwrap();
    }
    let marks = if fx.keys.old_also_bought_marks(item(1)) == fx.keys.old_also_bought_marks(item(2)) {
        1
    } else {
        2
    };
    assert_eq!(
        insights.remove_old_also_bought_decay().await.unwrap(),
        3 + marks
    );
    let mut left = fx.all_keys().await;
    left.sort();
    let mut lists = vec![fx.keys.also_bought(item(1)), fx.keys.also_bought(item(2))];
    lists.sort();
    assert_eq!(left, lists, "only the lists are left");
    assert_eq!(insights.remove_old_also_bought_decay().await.unwrap(), 0);
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
