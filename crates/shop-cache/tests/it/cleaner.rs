use std::collections::HashSet;
use std::time::Duration;

use redis::AsyncCommands;
use shop_cache::RedisConn;
use shop_cache::cart::Carts;
use shop_cache::domain::ItemId;
use shop_cache::session::{SessionToken, Sessions};
use shop_cache::session_cleaner::{BadBatch, CleanerStep, SessionCleaner};
use shop_testkit::TestRedis;
use tokio_util::sync::CancellationToken;

use crate::{all_keys, keys, redis};

/// `n` sessions, oldest first, each with one viewed item and one cart line.
async fn sessions_with_data(conn: &RedisConn, n: usize) -> Vec<SessionToken> {
    let sessions = Sessions::new(conn.clone(), keys());
    let carts = Carts::new(conn.clone(), keys(), 99);
    let tokens: Vec<SessionToken> = (0..n).map(|_| SessionToken::generate()).collect();
    for (i, t) in tokens.iter().enumerate() {
        let item = ItemId::new(i as u64 % 50 + 1).unwrap();
        sessions.touch(t, None, Some(item)).await.unwrap();
        carts.set(t, item, 1).await.unwrap();
    }
    tokens
}

async fn recent(server: &TestRedis) -> HashSet<String> {
    let all: Vec<String> = server.conn().await.zrange("recent:", 0, -1).await.unwrap();
    all.into_iter().collect()
}

/// Every `viewed:<token>` and `cart:<token>` belongs to a live session.
async fn assert_no_orphans(server: &TestRedis) {
    let live = recent(server).await;
    for key in all_keys(server).await {
        if let Some(token) = key
            .strip_prefix("viewed:")
            .or_else(|| key.strip_prefix("cart:"))
            .filter(|t| !t.is_empty())
        {
            assert!(live.contains(token), "orphan key {key}");
        }
    }
}

#[tokio::test]
async fn over_the_cap_by_n_removes_exactly_the_n_oldest() {
    let (server, conn) = redis().await;
    let tokens = sessions_with_data(&conn, 30).await;
    let login = Sessions::new(conn.clone(), keys());
    // Log the oldest and a survivor in, to check login: entries go with them.
    let _: () = server
        .conn()
        .await
        .hset("login:", tokens[0].expose(), 1)
        .await
        .unwrap();
    let _: () = server
        .conn()
        .await
        .hset("login:", tokens[29].expose(), 2)
        .await
        .unwrap();

    let cleaner = SessionCleaner::new(conn, keys(), 23, 100).unwrap();
    assert_eq!(cleaner.step().await.unwrap(), CleanerStep::Cleaned(7));
    assert_eq!(cleaner.step().await.unwrap(), CleanerStep::Idle);

    let live = recent(&server).await;
    for (i, t) in tokens.iter().enumerate() {
        let exists: u64 = server
            .conn()
            .await
            .exists(&[
                format!("viewed:{}", t.expose()),
                format!("cart:{}", t.expose()),
            ])
            .await
            .unwrap();
        if i < 7 {
            assert!(!live.contains(t.expose()), "session {i} should be gone");
            assert_eq!(exists, 0, "session {i}'s history and cart should be gone");
        } else {
            assert!(live.contains(t.expose()), "session {i} should remain");
            assert_eq!(exists, 2, "session {i}'s history and cart should remain");
        }
    }
    assert_eq!(login.check_token(&tokens[0]).await.unwrap(), None);
    assert!(login.check_token(&tokens[29]).await.unwrap().is_some());
    // The global view counts are not per-session data: cleaning keeps them.
    let views: u64 = server.conn().await.zcard("viewed:").await.unwrap();
    assert_eq!(views, 30);
    assert_no_orphans(&server).await;
}

#[tokio::test]
async fn a_step_removes_at_most_a_batch() {
    let (server, conn) = redis().await;
    sessions_with_data(&conn, 25).await;
    let cleaner = SessionCleaner::new(conn, keys(), 0, 10).unwrap();
    assert_eq!(cleaner.step().await.unwrap(), CleanerStep::Cleaned(10));
    assert_eq!(cleaner.step().await.unwrap(), CleanerStep::Cleaned(10));
    assert_eq!(cleaner.step().await.unwrap(), CleanerStep::Cleaned(5));
    assert_eq!(cleaner.step().await.unwrap(), CleanerStep::Idle);
    // What is left is item-level data (view counts, distinct viewers), not sessions'.
    let left = all_keys(&server).await;
    assert!(
        left.iter()
            .all(|k| k == "viewed:" || k.starts_with("viewers:")),
        "{left:?}"
    );
}

#[tokio::test]
async fn batch_must_be_in_range() {
    let (_server, conn) = redis().await;
    assert!(matches!(
        SessionCleaner::new(conn.clone(), keys(), 10, 0),
        Err(BadBatch(0))
    ));
    assert!(SessionCleaner::new(conn, keys(), 10, 2_001).is_err());
}

/// Two cleaners run while sessions are being touched: nothing touched after the
/// cleaning started is lost, nothing is removed twice, nothing is left orphaned.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_cleaners_keep_sessions_touched_during_cleaning() {
    const OLD: usize = 2_000;
    const CAP: u64 = 1_000;
    const NEW: usize = 300;
    const RETOUCHED: usize = 200;

    let (server, conn) = redis().await;
    let old = sessions_with_data(&conn, OLD).await;

    // Fresh activity during cleaning: new sessions, and the newest old sessions
    // seen again (they are never the oldest, so no cleaner may take them).
    let mut fresh: Vec<SessionToken> = (0..NEW).map(|_| SessionToken::generate()).collect();
    fresh.extend(old[OLD - RETOUCHED..].iter().cloned());

    let done = CancellationToken::new();
    let cleaner = |conn: RedisConn, done: CancellationToken| async move {
        let cleaner = SessionCleaner::new(conn, keys(), CAP, 7).unwrap();
        let mut removed = 0;
        loop {
            match cleaner.step().await.unwrap() {
                CleanerStep::Cleaned(n) => removed += n,
                CleanerStep::Idle if done.is_cancelled() => return removed,
                CleanerStep::Idle => tokio::task::yield_now().await,
            }
        }
    };
    let a = tokio::spawn(cleaner(conn.clone(), done.clone()));
    let b = tokio::spawn(cleaner(conn.clone(), done.clone()));

    let sessions = Sessions::new(conn.clone(), keys());
    for (i, t) in fresh.iter().enumerate() {
        let item = ItemId::new(1_000 + i as u64).unwrap();
        sessions.touch(t, None, Some(item)).await.unwrap();
    }
    done.cancel();
    let removed = a.await.unwrap() + b.await.unwrap();

    let live = recent(&server).await;
    assert_eq!(live.len() as u64, CAP);
    for t in &fresh {
        assert!(
            live.contains(t.expose()),
            "a session touched during cleaning was lost"
        );
        let history: u64 = server
            .conn()
            .await
            .zcard(format!("viewed:{}", t.expose()))
            .await
            .unwrap();
        assert!(history >= 1, "a fresh session lost its history");
    }
    // Exactly the oldest untouched sessions went, each counted once.
    let expected_gone = (OLD + NEW) as u64 - CAP;
    assert_eq!(removed, expected_gone, "sum of both cleaners' counts");
    for (i, t) in old.iter().enumerate() {
        assert_eq!(
            live.contains(t.expose()),
            i as u64 >= expected_gone,
            "old session {i}"
        );
    }
    assert_no_orphans(&server).await;
}

#[tokio::test]
async fn the_loop_cleans_then_stops_promptly_on_shutdown() {
    let (server, conn) = redis().await;
    sessions_with_data(&conn, 250).await;
    let cleaner = SessionCleaner::new(conn.clone(), keys(), 20, 100).unwrap();
    let shutdown = CancellationToken::new();
    let task = tokio::spawn(shop_cache::daemon::run(cleaner, shutdown.clone()));

    let sessions = Sessions::new(conn, keys());
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while sessions.count().await.unwrap() > 20 {
        assert!(tokio::time::Instant::now() < deadline, "loop did not clean");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // Now idle (sleeping its 1 s pause): shutdown must not wait for the pause.
    tokio::time::sleep(Duration::from_millis(50)).await;
    shutdown.cancel();
    tokio::time::timeout(Duration::from_millis(500), task)
        .await
        .expect("the loop stops before its idle pause ends")
        .unwrap();
    assert_eq!(sessions.count().await.unwrap(), 20);
    assert_no_orphans(&server).await;
}
