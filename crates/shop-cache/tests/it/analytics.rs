use std::time::Duration;

use crate::{Fixture, both_layouts};
use redis::AsyncCommands;
use shop_cache::analytics::{Analytics, RescaleStep, Rescaler};
use shop_cache::domain::ItemId;
use shop_cache::session::{SessionToken, Sessions, Touch};

/// Items 1..=n where item i has been viewed i times (so item n is the most viewed).
async fn views(fx: &Fixture, n: u64) {
    let mut raw = fx.raw().await;
    let ids: Vec<u64> = (1..=n).collect();
    for chunk in ids.chunks(1_000) {
        let members: Vec<(f64, u64)> = chunk.iter().map(|&i| (-(i as f64), i)).collect();
        let _: () = raw
            .zadd_multiple(fx.keys.item_views(), &members)
            .await
            .unwrap();
    }
}

const DAY: Duration = Duration::from_secs(86_400);

both_layouts! {
async fn rank_and_top_follow_the_views_recorded_by_touch(fx: Fixture) {
    let sessions = Sessions::new(fx.conn.clone(), fx.keys.clone());
    let analytics = Analytics::new(fx.conn.clone(), fx.keys.clone());
    let t = SessionToken::generate();
    let item = |n| ItemId::new(n).unwrap();
    for (id, times) in [(10, 3), (20, 5), (30, 1)] {
        for _ in 0..times {
            sessions.touch(&t, Touch::request().view(item(id))).await.unwrap();
        }
    }
    sessions.flush_views().await.unwrap();
    assert_eq!(analytics.rank(item(20)).await.unwrap(), Some(0));
    assert_eq!(analytics.rank(item(10)).await.unwrap(), Some(1));
    assert_eq!(analytics.rank(item(30)).await.unwrap(), Some(2));
    assert_eq!(analytics.rank(item(40)).await.unwrap(), None);
    assert_eq!(
        analytics.top(2).await.unwrap(),
        vec![(item(20), 5.0), (item(10), 3.0)]
    );
    assert!(analytics.top(0).await.unwrap().is_empty());
}

async fn rescale_keeps_the_20000_most_viewed_and_halves_them(fx: Fixture) {
    views(&fx, 25_000).await;
    let rescaler = Rescaler::new(fx.conn.clone(), fx.keys.clone(), DAY, 20_000);
    assert_eq!(
        rescaler.step().await.unwrap(),
        RescaleStep::Rescaled(20_000)
    );

    let mut raw = fx.raw().await;
    let viewed = fx.keys.item_views();
    let size: u64 = raw.zcard(viewed).await.unwrap();
    assert_eq!(size, 20_000);
    // The most viewed survive (the book's ZREMRANGEBYRANK 0 -20001 would have
    // removed exactly these), the least viewed are gone.
    let top: Option<f64> = raw.zscore(viewed, 25_000).await.unwrap();
    assert_eq!(top, Some(-12_500.0), "halved");
    let last_kept: Option<f64> = raw.zscore(viewed, 5_001).await.unwrap();
    assert_eq!(last_kept, Some(-2_500.5));
    let dropped: Option<f64> = raw.zscore(viewed, 5_000).await.unwrap();
    assert_eq!(dropped, None);
    let rank: Option<u64> = raw.zrank(viewed, 25_000).await.unwrap();
    assert_eq!(rank, Some(0));
}

async fn fewer_items_than_the_limit_are_only_halved(fx: Fixture) {
    views(&fx, 10).await;
    let rescaler = Rescaler::new(fx.conn.clone(), fx.keys.clone(), DAY, 20_000);
    assert_eq!(rescaler.step().await.unwrap(), RescaleStep::Rescaled(10));
    let score: Option<f64> = fx
        .raw()
        .await
        .zscore(fx.keys.item_views(), 10)
        .await
        .unwrap();
    assert_eq!(score, Some(-5.0));
}

#[multi_thread]
async fn many_rescalers_in_one_period_rescale_once(fx: Fixture) {
    views(&fx, 100).await;
    let workers = (0..8).map(|_| {
        let r = Rescaler::new(fx.conn.clone(), fx.keys.clone(), DAY, 20_000);
        tokio::spawn(async move { r.step().await.unwrap() })
    });
    let outcomes: Vec<RescaleStep> = futures::future::join_all(workers)
        .await
        .into_iter()
        .map(Result::unwrap)
        .collect();
    let rescaled = outcomes
        .iter()
        .filter(|o| matches!(o, RescaleStep::Rescaled(_)))
        .count();
    assert_eq!(rescaled, 1, "{outcomes:?}");
    let score: Option<f64> = fx
        .raw()
        .await
        .zscore(fx.keys.item_views(), 100)
        .await
        .unwrap();
    assert_eq!(score, Some(-50.0), "halved once, not eight times");
}

async fn the_next_period_rescales_again(fx: Fixture) {
    views(&fx, 4).await;
    let rescaler = Rescaler::new(
        fx.conn.clone(),
        fx.keys.clone(),
        Duration::from_secs(1),
        20_000,
    );
    assert!(matches!(
        rescaler.step().await.unwrap(),
        RescaleStep::Rescaled(_)
    ));
    // Wait for the next one-second period on the server's clock.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    loop {
        match rescaler.step().await.unwrap() {
            RescaleStep::Rescaled(_) => break,
            RescaleStep::AlreadyDone => {
                assert!(tokio::time::Instant::now() < deadline);
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
    let score: Option<f64> = fx
        .raw()
        .await
        .zscore(fx.keys.item_views(), 4)
        .await
        .unwrap();
    assert_eq!(score, Some(-1.0), "4 views halved twice");
}

async fn a_longer_interval_takes_effect_without_stopping_the_rescales(fx: Fixture) {
    // The marker used to be a period number (now / interval): after running with a
    // 1 s interval, a 2 s interval's period numbers were all smaller, and rescaling
    // stopped for good. It is the time of the last rescale now.
    views(&fx, 8).await;
    let short = Rescaler::new(
        fx.conn.clone(),
        fx.keys.clone(),
        Duration::from_secs(1),
        20_000,
    );
    assert!(matches!(
        short.step().await.unwrap(),
        RescaleStep::Rescaled(_)
    ));
    let longer = Rescaler::new(
        fx.conn.clone(),
        fx.keys.clone(),
        Duration::from_secs(2),
        20_000,
    );
    assert_eq!(longer.step().await.unwrap(), RescaleStep::AlreadyDone);
    tokio::time::sleep(Duration::from_millis(2_100)).await;
    assert!(
        matches!(longer.step().await.unwrap(), RescaleStep::Rescaled(_)),
        "two seconds after the last rescale, a 2 s interval rescales"
    );
    let score: Option<f64> = fx
        .raw()
        .await
        .zscore(fx.keys.item_views(), 8)
        .await
        .unwrap();
    assert_eq!(score, Some(-2.0), "8 views halved twice");
}
}
