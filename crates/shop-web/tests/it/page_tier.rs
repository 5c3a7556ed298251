//! The in-process page tier: a second web server serves a cached page from its own
//! memory with no Redis command, drops it the moment a purge on the first server
//! returns, serves nothing from a tier whose subscription dropped until it has been
//! emptied, serves what it holds while Redis is down, and serves nothing stored
//! before the state Redis lost its data. And the item pages' held-back touches: a
//! graceful stop writes every one.

use std::time::{Duration, Instant};

use axum::http::StatusCode;
use axum::response::Response;
use redis::AsyncCommands;
use shop_cache::domain::ItemId;
use shop_cache::domain::catalogue::ItemEdit;
use shop_cache::session::{SessionToken, ViewFlusher};
use shop_testapp::{TestApp, get_request, send, text};
use shop_web::AppState;
use shop_web::page_cache::tier::FeedStep;
use tokio_util::sync::CancellationToken;

fn item(n: u64) -> ItemId {
    ItemId::new(n).unwrap()
}

fn x_cache(resp: &Response) -> String {
    resp.headers()
        .get("x-cache")
        .map(|v| v.to_str().unwrap().to_owned())
        .unwrap_or_default()
}

/// Polls `ready` every 5 ms until it holds, for at most `limit`.
async fn wait_until(limit: Duration, what: &str, mut ready: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !ready() {
        assert!(Instant::now() < deadline, "not within {limit:?}: {what}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

async fn get(state: &AppState, uri: &str) -> Response {
    send(&shop_web::router(state.clone()), get_request(uri)).await
}

/// Commands Redis ran so far, other than the feeds' pings and generation checks
/// (a script call each second) and these `INFO`s.
async fn commands_processed(app: &TestApp) -> u64 {
    app.command_calls()
        .await
        .into_iter()
        .filter(|(name, _)| name != "ping" && name != "info" && name != "evalsha")
        .map(|(_, calls)| calls)
        .sum()
}

/// The page cache's purge epoch in the state Redis.
async fn purge_epoch(app: &TestApp) -> u64 {
    app.redis
        .conn()
        .await
        .hget(shop_page_cache::PageKeys::new(&app.keys).purges(), "epoch")
        .await
        .unwrap()
}

/// Polls `server`'s `/items/3` until it shows "Brand new title" (until then, the
/// `old` one), for at most 2 s after the change returned at `changed`.
async fn serves_the_new_title_within_2_s(
    name: &str,
    server: &AppState,
    old: &str,
    changed: Instant,
) {
    let mut seen_old = 0;
    loop {
        let html = text(get(server, "/items/3").await).await;
        if html.contains("Brand new title") {
            break;
        }
        assert!(html.contains(old));
        seen_old += 1;
        assert!(
            changed.elapsed() < Duration::from_secs(2),
            "{name} still serves the old page {seen_old} times after 2 s"
        );
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    eprintln!(
        "{name} served the old page {seen_old} times, until {:?} after the change returned",
        changed.elapsed()
    );
}

#[tokio::test]
async fn a_second_server_serves_from_its_tier_and_drops_a_purged_page_at_once() {
    let app = TestApp::start().await;
    let stop = CancellationToken::new();
    let (a, b) = (app.state.clone(), app.second_state());
    shop_testapp::run_tier_feed(&a, &stop).await;
    shop_testapp::run_tier_feed(&b, &stop).await;
    app.rank(&[3]).await;
    let old = app.db.item(item(3)).await.unwrap().unwrap().title;
    assert_eq!(x_cache(&get(&a, "/items/3").await), "MISS");
    assert_eq!(x_cache(&get(&b, "/items/3").await), "HIT", "from Redis");

    // From b's own memory: no Redis command for 50 views.
    let before = commands_processed(&app).await;
    for _ in 0..50 {
        let resp = get(&b, "/items/3").await;
        assert_eq!(x_cache(&resp), "HIT");
        assert!(text(resp).await.contains(&old));
    }
    let used = commands_processed(&app).await - before;
    assert_eq!(used, 0, "Redis commands for 50 views from the tier");
    let tier_b = b.tier.clone().unwrap();
    assert!(
        tier_b
            .stats()
            .hits
            .load(std::sync::atomic::Ordering::Relaxed)
            >= 50
    );

    // A change on server a: once it returns, b drops its copy within moments.
    let edit = ItemEdit::new(Some("Brand new title"), None, None, None).unwrap();
    a.catalogue().update(item(3), &edit, None).await.unwrap();
    serves_the_new_title_within_2_s("b", &b, &old, Instant::now()).await;
    // And b keeps the new page in its tier again.
    let resp = get(&b, "/items/3").await;
    assert_eq!(x_cache(&resp), "HIT");
    assert!(text(resp).await.contains("Brand new title"));
    stop.cancel();
}

#[tokio::test]
async fn a_tier_whose_subscription_dropped_serves_nothing_until_it_is_emptied() {
    let app = TestApp::start().await;
    let (a, b) = (app.state.clone(), app.second_state());
    let mut feed = b.tier_feed().unwrap();
    assert_eq!(feed.step().await.unwrap(), FeedStep::Subscribed);
    let tier = b.tier.clone().unwrap();
    let count = |c: &std::sync::atomic::AtomicU64| c.load(std::sync::atomic::Ordering::Relaxed);
    assert_eq!(count(&tier.stats().emptied), 1);
    app.rank(&[3]).await;
    let old = app.db.item(item(3)).await.unwrap().unwrap().title;
    get(&a, "/items/3").await;
    get(&b, "/items/3").await;
    assert_eq!(x_cache(&get(&b, "/items/3").await), "HIT");
    assert_eq!(count(&tier.stats().hits), 1, "served from the tier");

    // b's subscription is cut; a purge goes out that b never hears.
    let killed: u64 = redis::cmd("CLIENT")
        .arg(&["KILL", "TYPE", "pubsub"])
        .query_async(&mut app.redis.conn().await)
        .await
        .unwrap();
    assert_eq!(killed, 1);
    let edit = ItemEdit::new(Some("Brand new title"), None, None, None).unwrap();
    a.catalogue().update(item(3), &edit, None).await.unwrap();

    // The feed finds the subscription gone (after the events it had received
    // before: a's store of the page): b serves from Redis, new.
    let mut step = feed.step().await.unwrap();
    while step == FeedStep::Event {
        step = feed.step().await.unwrap();
    }
    assert_eq!(step, FeedStep::Lost);
    assert!(!tier.is_trusted());
    let html = text(get(&b, "/items/3").await).await;
    assert!(html.contains("Brand new title") && !html.contains(&old));
    let hits = count(&tier.stats().hits);
    get(&b, "/items/3").await;
    assert_eq!(
        count(&tier.stats().hits),
        hits,
        "nothing from an untrusted tier"
    );

    // Subscribed again: emptied first, then trusted and filled anew.
    assert_eq!(feed.step().await.unwrap(), FeedStep::Subscribed);
    assert_eq!(count(&tier.stats().emptied), 2);
    get(&b, "/items/3").await;
    let resp = get(&b, "/items/3").await;
    assert_eq!(count(&tier.stats().hits), hits + 1);
    assert!(text(resp).await.contains("Brand new title"));
}

#[tokio::test]
async fn while_redis_is_down_the_tier_serves_what_it_holds() {
    let mut app = TestApp::start().await;
    let stop = CancellationToken::new();
    let state = app.state.clone();
    shop_testapp::run_tier_feed(&state, &stop).await;
    app.rank(&[3]).await;
    let title = app.db.item(item(3)).await.unwrap().unwrap().title;
    assert_eq!(x_cache(&get(&state, "/items/3").await), "MISS");
    assert_eq!(x_cache(&get(&state, "/items/3").await), "HIT");

    app.redis.kill();
    let tier = state.tier.clone().unwrap();
    wait_until(Duration::from_secs(10), "the feed sees Redis gone", || {
        !tier.is_trusted()
    })
    .await;
    for _ in 0..5 {
        let resp = get(&state, "/items/3").await;
        assert_eq!(resp.status(), StatusCode::OK);
        assert_eq!(
            x_cache(&resp),
            "STALE",
            "the tier's copy while Redis is down"
        );
        assert!(text(resp).await.contains(&title));
    }
    // A page it does not hold is rendered, as before.
    let resp = get(&state, "/items/4").await;
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(x_cache(&resp), "BYPASS");

    // Redis is back (empty): the feed subscribes again and the tier is emptied.
    app.redis.restart();
    wait_until(Duration::from_secs(20), "subscribed again", || {
        tier.is_trusted()
    })
    .await;
    assert_eq!(
        tier.stats()
            .emptied
            .load(std::sync::atomic::Ordering::Relaxed),
        2
    );
    stop.cancel();
}

#[tokio::test]
async fn a_graceful_stop_writes_every_held_touch() {
    let app = TestApp::start().await;
    let cookie = app.visitor().await;
    let token: SessionToken = cookie.split_once('=').unwrap().1.parse().unwrap();
    for id in [3, 4, 5, 999] {
        app.get(&format!("/items/{id}"), Some(&cookie)).await;
    }
    assert_eq!(app.state.sessions.pending_touches(), 1, "held, not written");
    assert!(!app.redis.all_keys().await.contains(&"recent:".to_owned()));

    // The serving process's flusher, stopped as `shop serve` stops it.
    let stop = CancellationToken::new();
    let flusher = tokio::spawn(shop_cache::daemon::run(
        ViewFlusher::new(app.state.sessions.clone()),
        stop.clone(),
    ));
    stop.cancel();
    flusher.await.unwrap();
    assert_eq!(app.state.sessions.pending_touches(), 0);
    assert_eq!(app.state.sessions.pending_views(), 0);
    let viewed = app.state.sessions.recently_viewed(&token).await.unwrap();
    assert_eq!(
        viewed,
        vec![item(5), item(4), item(3)],
        "in order, found pages only"
    );
    let mut raw = app.redis.conn().await;
    let seen: Option<f64> = raw.zscore("recent:", token.expose()).await.unwrap();
    assert!(seen.is_some(), "the session is last seen now");
    let count: Option<f64> = raw.zscore("viewed:", 4).await.unwrap();
    assert_eq!(count, Some(-1.0));
}

/// The state Redis loses its data (here `FLUSHALL`; a restart without its file or a
/// failover to a replica that missed writes is the same) while the pages stay in
/// the cache Redis and in two servers' tiers: the purge of a change then finds no
/// tag to purge. Once the change returns, its server serves the new page at once,
/// and the other as soon as the generation's event reaches it.
#[tokio::test]
async fn a_state_redis_that_lost_its_data_still_purges_every_copy() {
    let app = TestApp::start().await;
    let cache = shop_testkit::TestRedis::start();
    let cache_conn = shop_cache::connect(&cache.url()).await.unwrap();
    let server = || {
        AppState::with_cache(
            app.db.clone(),
            app.conn.clone(),
            Some(cache_conn.clone()),
            app.keys.clone(),
            app.config.clone(),
        )
    };
    let (a, b) = (server(), server());
    let stop = CancellationToken::new();
    shop_testapp::run_tier_feed(&a, &stop).await;
    shop_testapp::run_tier_feed(&b, &stop).await;
    app.rank(&[3]).await;
    let old = app.db.item(item(3)).await.unwrap().unwrap().title;
    assert_eq!(x_cache(&get(&a, "/items/3").await), "MISS");
    assert_eq!(
        x_cache(&get(&b, "/items/3").await),
        "HIT",
        "from the cache Redis"
    );
    assert_eq!(x_cache(&get(&a, "/items/3").await), "HIT");
    let epoch_before = purge_epoch(&app).await;

    let _: () = redis::cmd("FLUSHALL")
        .query_async(&mut app.redis.conn().await)
        .await
        .unwrap();
    // The ranking comes back with the traffic; the pages are still in the cache
    // Redis and in both tiers.
    app.rank(&[3]).await;
    // The change comes from a process that knew no generation (as `shop items
    // update` does): its purge starts the new one and tells both servers.
    let edit = ItemEdit::new(Some("Brand new title"), None, None, None).unwrap();
    server()
        .catalogue()
        .update(item(3), &edit, None)
        .await
        .unwrap();
    let changed = Instant::now();
    serves_the_new_title_within_2_s("a", &a, &old, changed).await;
    serves_the_new_title_within_2_s("b", &b, &old, changed).await;
    // The epoch went on from where it was, not from 1.
    let epoch_after = purge_epoch(&app).await;
    assert!(
        epoch_after > epoch_before,
        "{epoch_after} after {epoch_before}"
    );
    // The new page is cached again, in Redis and in the tiers.
    assert!(
        text(get(&b, "/items/3").await)
            .await
            .contains("Brand new title")
    );
    assert_eq!(x_cache(&get(&b, "/items/3").await), "HIT");
    stop.cancel();
}

/// Without any purge, a server notices the loss within about a second (its tier's
/// feed checks the generation) and stops serving what it stored before.
#[tokio::test]
async fn a_server_notices_a_lost_state_redis_without_a_purge() {
    let app = TestApp::start().await;
    let cache = shop_testkit::TestRedis::start();
    let a = AppState::with_cache(
        app.db.clone(),
        app.conn.clone(),
        Some(shop_cache::connect(&cache.url()).await.unwrap()),
        app.keys.clone(),
        app.config.clone(),
    );
    let stop = CancellationToken::new();
    shop_testapp::run_tier_feed(&a, &stop).await;
    app.rank(&[3]).await;
    assert_eq!(x_cache(&get(&a, "/items/3").await), "MISS");
    assert_eq!(x_cache(&get(&a, "/items/3").await), "HIT");
    let since = a.pages.generation().since();
    assert!(since > 0, "learnt at the render");
    let _: () = redis::cmd("FLUSHALL")
        .query_async(&mut app.redis.conn().await)
        .await
        .unwrap();
    wait_until(Duration::from_secs(10), "a new generation learnt", || {
        a.pages.generation().since() > since
    })
    .await;
    app.rank(&[3]).await;
    assert_eq!(
        x_cache(&get(&a, "/items/3").await),
        "MISS",
        "nothing from before"
    );
    stop.cancel();
}
