//! Redis going away and coming back: typed errors meanwhile, recovery after.

use std::time::Duration;

use redis::aio::ConnectionManagerConfig;
use shop_cache::cart::Carts;
use shop_cache::domain::ItemId;
use shop_cache::session::{SessionToken, Sessions, Touch};
use shop_cache::session_cleaner::SessionCleaner;
use shop_testkit::TestRedis;
use tokio_util::sync::CancellationToken;

use crate::keys;

fn quick() -> ConnectionManagerConfig {
    ConnectionManagerConfig::new()
        .set_response_timeout(Some(Duration::from_millis(500)))
        .set_connection_timeout(Some(Duration::from_millis(200)))
        .set_number_of_retries(1)
        .set_max_delay(Duration::from_millis(50))
}

#[tokio::test]
async fn a_killed_server_gives_typed_errors_and_a_restarted_one_is_used_again() {
    let mut server = TestRedis::start();
    let conn = shop_cache::connect_with(&server.url(), quick())
        .await
        .unwrap();
    let sessions = Sessions::new(conn.clone(), keys());
    let carts = Carts::new(conn.clone(), keys(), 99);
    let cleaner = SessionCleaner::new(conn.clone(), keys(), 0, 10).unwrap();
    let t = SessionToken::generate();
    let item = ItemId::new(1).unwrap();
    sessions
        .touch(&t, Touch::request().view(item))
        .await
        .unwrap();

    // A daemon loop running through the outage must survive it.
    let shutdown = CancellationToken::new();
    let daemon = tokio::spawn(shop_cache::daemon::run(
        SessionCleaner::new(conn.clone(), keys(), 1_000, 10).unwrap(),
        shutdown.clone(),
    ));

    server.kill();
    let errors = [
        sessions
            .touch(&t, Touch::request().view(item))
            .await
            .unwrap_err(),
        sessions.check_token(&t).await.unwrap_err(),
        carts.set(&t, item, 1).await.unwrap_err(),
        carts.get(&t).await.unwrap_err(),
        cleaner.step().await.unwrap_err(),
    ];
    for e in &errors {
        assert!(e.is_unavailable(), "{e:?}");
        assert!(e.is_unavailable());
    }
    assert!(
        !daemon.is_finished(),
        "the daemon loop must outlive an outage"
    );

    server.restart();
    // The same handles recover by themselves once Redis is back.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        match sessions.touch(&t, Touch::request().view(item)).await {
            Ok(_) => break,
            Err(e) => {
                assert!(tokio::time::Instant::now() < deadline, "no reconnect: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
    carts.set(&t, item, 2).await.unwrap();
    assert_eq!(carts.get(&t).await.unwrap().len(), 1);
    assert_eq!(sessions.count().await.unwrap(), 1, "a new, empty server");
    shutdown.cancel();
    daemon.await.unwrap();
}

/// A Redis restarted on a data set it takes seconds to load answers every
/// command with `LOADING` meanwhile: the handle takes that as Redis down (its
/// breaker opens, logged once, and requests fail fast rather than each meeting
/// the error and logging it), and serves again once the load is done.
#[tokio::test]
async fn a_redis_loading_its_data_fails_fast_until_it_has_loaded() {
    let mut server = TestRedis::start();
    let conn = shop_cache::connect_with(&server.url(), quick())
        .await
        .unwrap();
    let sessions = Sessions::new(conn.clone(), keys());
    let t = SessionToken::generate();
    let item = ItemId::new(1).unwrap();
    sessions
        .touch(&t, Touch::request().view(item))
        .await
        .unwrap();
    let mut fill = redis::pipe();
    for n in 0..20_000 {
        fill.set(format!("filler:{n}"), n).ignore();
    }
    let _: () = fill.query_async(&mut server.conn().await).await.unwrap();
    // About two seconds of loading.
    server.reload_slowly(Duration::from_micros(100));

    let is_loading = |e: &shop_cache::CacheError| {
        matches!(e, shop_cache::CacheError::Redis(e)
            if e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::BusyLoading))
    };
    let (mut loading, mut fast) = (0, 0);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        match sessions.check_token(&t).await {
            Ok(_) => break,
            Err(e) if is_loading(&e) => {
                loading += 1;
                assert_eq!(
                    conn.nodes_failing().failing,
                    ["redis"],
                    "a LOADING answer opens the breaker"
                );
            }
            Err(e) if e.is_failing_fast() => fast += 1,
            Err(e) => assert!(e.is_unavailable(), "{e:?}"),
        }
        assert!(tokio::time::Instant::now() < deadline, "never loaded");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(loading >= 1, "the test saw Redis loading");
    assert!(fast > loading, "{fast} failed fast, {loading} met LOADING");
    assert_eq!(
        sessions.count().await.unwrap(),
        1,
        "the session loaded back"
    );
    assert!(conn.nodes_failing().failing.is_empty());
}

#[tokio::test]
async fn connecting_to_nothing_is_an_error_not_a_panic() {
    let dir = tempfile_path();
    let url = format!("unix://{dir}/none.sock");
    let Err(err) = shop_cache::connect_with(&url, quick()).await else {
        panic!("connected to a socket that does not exist");
    };
    assert!(err.is_unavailable());
}

fn tempfile_path() -> String {
    std::env::temp_dir()
        .join("shop-no-such-dir")
        .display()
        .to_string()
}

/// A view flush whose answer was lost while Redis stalled (its call timed out,
/// yet ran when Redis woke) is sent again and counted once, not twice.
#[tokio::test]
async fn a_view_flush_whose_answer_was_lost_in_a_stall_counts_once() {
    let server = TestRedis::start();
    let conn = shop_cache::connect(&server.url())
        .await
        .unwrap()
        .with_budget(Duration::from_millis(100));
    let sessions = Sessions::new(conn, keys());
    let t = SessionToken::generate();
    // A first flush loads the script: the stalled call below is one Redis runs
    // when it wakes (not a NOSCRIPT that would change nothing).
    let other = ItemId::new(9).unwrap();
    sessions
        .touch(&t, Touch::request().view(other))
        .await
        .unwrap();
    sessions.flush_views().await.unwrap();
    let item = ItemId::new(5).unwrap();
    for _ in 0..3 {
        sessions
            .touch(&t, Touch::request().view(item))
            .await
            .unwrap();
    }
    server.pause();
    let lost = sessions.flush_views().await;
    server.resume();
    assert!(lost.is_err(), "a stalled Redis answers nothing");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while sessions.flush_views().await.is_err() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "Redis never answered"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(sessions.pending_views(), 0);
    let mut raw = shop_cache::connect(&server.url()).await.unwrap();
    let views: f64 = redis::AsyncCommands::zscore(&mut raw, keys().item_views(), 5)
        .await
        .unwrap();
    assert_eq!(views, -3.0, "counted once");
}

/// A release answered by a node that then lost it (a primary a failover replaced
/// while it stalled answers, then becomes a replica of the new primary, which
/// still holds the lock) is run once more after the failover settles.
#[tokio::test]
async fn a_release_lost_by_a_replaced_primary_is_run_again() {
    let server = TestRedis::start();
    let conn = shop_cache::connect(&server.url())
        .await
        .unwrap()
        .with_budget(Duration::from_millis(100));
    let key = "lock-under-test".to_owned();
    let ttl = Duration::from_secs(30);
    let lock = shop_cache::lock::take(&conn, key.clone(), ttl)
        .await
        .unwrap()
        .expect("nobody holds it");
    let mut raw = server
        .client()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let holder: String = redis::cmd("GET")
        .arg(&key)
        .query_async(&mut raw)
        .await
        .unwrap();
    server.pause();
    let released = shop_cache::lock::release(&conn, lock).await;
    server.resume();
    assert!(released.is_err(), "a stalled Redis answers nothing");
    // The release runs in the background once Redis answers ...
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    loop {
        let held: Option<String> = redis::cmd("GET")
            .arg(&key)
            .query_async(&mut raw)
            .await
            .unwrap();
        if held.is_none() {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "never released");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // ... and is lost as a replaced primary loses it: the new primary holds it.
    let _: () = redis::cmd("SET")
        .arg(&key)
        .arg(&holder)
        .arg("PX")
        .arg(30_000)
        .query_async(&mut raw)
        .await
        .unwrap();
    taken_within(
        &conn,
        &key,
        shop_cache::lock::SETTLE + Duration::from_secs(5),
        "the lock its holder let go still refuses its key",
    )
    .await;
}

/// A lock taken while Redis stalled (the answer given up on, the `SET` run when
/// Redis woke) is let go by itself once Redis answers: it does not refuse its key
/// for its whole time (a cart's checkout, half a minute).
#[tokio::test]
async fn a_lock_whose_take_went_unanswered_is_let_go_when_redis_wakes() {
    let server = TestRedis::start();
    let conn = shop_cache::connect(&server.url())
        .await
        .unwrap()
        .with_budget(Duration::from_millis(100));
    let key = "lock-under-test".to_owned();
    let ttl = Duration::from_secs(30);
    // The script loaded first (see above).
    let warm = shop_cache::lock::take(&conn, "warm".to_owned(), ttl)
        .await
        .unwrap();
    shop_cache::lock::release(&conn, warm.unwrap())
        .await
        .unwrap();
    server.pause();
    let taken = shop_cache::lock::take(&conn, key.clone(), ttl).await;
    server.resume();
    assert!(taken.is_err(), "a stalled Redis answers nothing");
    taken_within(
        &conn,
        &key,
        Duration::from_secs(5),
        "the lock nobody holds still refuses its key",
    )
    .await;
}

/// Takes (and lets go) the lock `key`, polling, failing with `what` if it is
/// still refused after `within`.
async fn taken_within(conn: &shop_cache::RedisConn, key: &str, within: Duration, what: &str) {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        if let Ok(Some(lock)) =
            shop_cache::lock::take(conn, key.to_owned(), Duration::from_secs(30)).await
        {
            shop_cache::lock::release(conn, lock).await.unwrap();
            return;
        }
        assert!(tokio::time::Instant::now() < deadline, "{what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
