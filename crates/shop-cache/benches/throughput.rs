//! Whole-workload measurements that criterion's adaptive iterations do not fit, each
//! against a private redis-server and each next to its baseline in the same run:
//!
//! 1. the Redis ceiling: the book's five `update_token` commands as a plain pipeline
//!    over 50 connections straight through redis-rs, against the shop's `touch` from
//!    50 concurrent callers on the shop's one multiplexed connection; their ratio;
//! 2. the session cleaner: sessions removed per second, the shop's atomic script
//!    (batch 100 and 1,000) against the book's five-command rounds;
//! 3. memory: Redis bytes per session (25 viewed items, 3 cart lines) over 100,000
//!    sessions, from `INFO memory`, and bytes per cached item page.
//!
//! Run: `cargo bench -p shop-cache --bench throughput` (about a minute).

#![allow(missing_docs)]

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use redis::aio::MultiplexedConnection;
use shop_cache::RedisConn;
use shop_cache::book;
use shop_cache::domain::{ItemId, UserId};
use shop_cache::keys::Keys;
use shop_cache::page_cache::StoredPage;
use shop_cache::session::{HISTORY_LEN, SessionToken, Sessions};
use shop_cache::session_cleaner::{CleanerStep, SessionCleaner};
use shop_testkit::TestRedis;

const CALLERS: usize = 50;
const TOUCHES: u64 = 200_000;
const SESSIONS_TO_CLEAN: usize = 200_000;
const MEMORY_SESSIONS: usize = 100_000;

fn main() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        ceiling().await;
        cleaner().await;
        memory().await;
    });
}

/// Spreads `TOUCHES` calls of `op` over `CALLERS` tasks; returns calls per second.
async fn concurrently<F, Fut>(op: F) -> f64
where
    F: Fn(usize, u64) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = ()> + Send,
{
    let op = Arc::new(op);
    let next = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for caller in 0..CALLERS {
        let (op, next) = (op.clone(), next.clone());
        tasks.spawn(async move {
            loop {
                let n = next.fetch_add(1, Ordering::Relaxed);
                if n >= TOUCHES {
                    return;
                }
                op(caller, n).await;
            }
        });
    }
    while tasks.join_next().await.is_some() {}
    TOUCHES as f64 / started.elapsed().as_secs_f64()
}

fn pick(n: u64, tokens: &[SessionToken]) -> (SessionToken, UserId, ItemId) {
    let mix = n.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    let token = tokens[(mix % tokens.len() as u64) as usize].clone();
    let user = UserId::new(mix % 100_000 + 1).unwrap();
    let item = ItemId::new((mix >> 24) % 100_000 + 1).unwrap();
    (token, user, item)
}

async fn ceiling() {
    let server = TestRedis::start();
    let keys = Keys::default();
    let tokens: Arc<Vec<SessionToken>> =
        Arc::new((0..10_000).map(|_| SessionToken::generate()).collect());
    let mut conns: Vec<MultiplexedConnection> = Vec::new();
    for _ in 0..CALLERS {
        conns.push(
            server
                .client()
                .get_multiplexed_async_connection()
                .await
                .unwrap(),
        );
    }
    let conns = Arc::new(conns);
    let shop = Sessions::new(
        shop_cache::connect(&server.url()).await.unwrap(),
        keys.clone(),
    );

    println!(
        "== 1. session touch at {CALLERS} concurrent callers ({TOUCHES} each way, alternated 3 times)"
    );
    let mut best = (0.0f64, 0.0f64);
    for round in 1..=3 {
        let (k, t, c) = (keys.clone(), tokens.clone(), conns.clone());
        let pipeline = concurrently(move |caller, n| {
            let (k, t, c) = (k.clone(), t.clone(), c.clone());
            async move {
                let (token, user, item) = pick(n, &t);
                let now = n as f64;
                let viewed = k.viewed_by(&token);
                let mut conn = c[caller].clone();
                redis::pipe()
                    .hset(k.login_of(&token), token.expose(), user)
                    .ignore()
                    .zadd(k.recent_of(&token), token.expose(), now)
                    .ignore()
                    .zadd(&viewed, item, now)
                    .ignore()
                    .zremrangebyrank(&viewed, 0, -(HISTORY_LEN as isize) - 1)
                    .ignore()
                    .zincr(k.item_views(), item, -1)
                    .ignore()
                    .exec_async(&mut conn)
                    .await
                    .unwrap();
            }
        })
        .await;
        let (s, t) = (shop.clone(), tokens.clone());
        let touch = concurrently(move |_, n| {
            let (s, t) = (s.clone(), t.clone());
            async move {
                let (token, user, item) = pick(n, &t);
                s.touch(&token, Some(user), Some(item)).await.unwrap();
            }
        })
        .await;
        println!(
            "   round {round}: book pipeline over {CALLERS} connections {pipeline:>9.0}/s | shop touch {touch:>9.0}/s | ratio {:.2}x",
            touch / pipeline
        );
        best = (best.0.max(pipeline), best.1.max(touch));
    }
    println!(
        "   best of 3: ceiling {:.0}/s, shop {:.0}/s, ratio {:.2}x\n",
        best.0,
        best.1,
        best.1 / best.0
    );
}

/// `n` sessions with a login, 3 viewed items and 2 cart lines each.
async fn populate(conn: &mut MultiplexedConnection, keys: &Keys, n: usize) {
    for chunk in (0..n).collect::<Vec<_>>().chunks(1_000) {
        let mut pipe = redis::pipe();
        for &i in chunk {
            let token = SessionToken::generate();
            pipe.hset(keys.login_of(&token), token.expose(), i + 1)
                .ignore()
                .zadd(keys.recent_of(&token), token.expose(), i as f64)
                .ignore()
                .zadd_multiple(keys.viewed_by(&token), &[(1.0, 1), (2.0, 2), (3.0, 3)])
                .ignore()
                .hset_multiple(keys.cart(&token), &[(1, 1), (2, 2)])
                .ignore();
        }
        pipe.exec_async(conn).await.unwrap();
    }
}

async fn cleaner() {
    println!(
        "== 2. session cleaner, {SESSIONS_TO_CLEAN} sessions (login, 3 views, 2 cart lines each), cap 0"
    );
    let keys = Keys::default();
    for (name, batch) in [
        ("book, 5 commands a round", 100),
        ("shop script, batch 100", 100),
        ("shop script, batch 1000", 1_000),
    ] {
        let server = TestRedis::start();
        let mut raw = server.conn().await;
        populate(&mut raw, &keys, SESSIONS_TO_CLEAN).await;
        let mut conn: RedisConn = shop_cache::connect(&server.url()).await.unwrap();
        let started = Instant::now();
        let mut removed = 0;
        if name.starts_with("book") {
            loop {
                let n = book::clean_sessions_once(&mut conn, &keys, 0, batch)
                    .await
                    .unwrap();
                if n == 0 {
                    break;
                }
                removed += n;
            }
        } else {
            let cleaner = SessionCleaner::new(conn, keys.clone(), 0, batch as u32).unwrap();
            while let CleanerStep::Cleaned(n) = cleaner.step().await.unwrap() {
                removed += n;
            }
        }
        let secs = started.elapsed().as_secs_f64();
        assert_eq!(removed as usize, SESSIONS_TO_CLEAN);
        println!("   {name:<26} {:>9.0} sessions/s", removed as f64 / secs);
    }
    println!();
}

async fn used_memory(conn: &mut MultiplexedConnection) -> u64 {
    let info: String = redis::cmd("INFO")
        .arg("memory")
        .query_async(conn)
        .await
        .unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix("used_memory:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap()
}

async fn memory() {
    println!("== 3. memory");
    let server = TestRedis::start();
    let mut raw = server.conn().await;
    let keys = Keys::default();
    let before = used_memory(&mut raw).await;
    for chunk in (0..MEMORY_SESSIONS).collect::<Vec<_>>().chunks(500) {
        let mut pipe = redis::pipe();
        for &i in chunk {
            let token = SessionToken::generate();
            let viewed: Vec<(f64, u64)> = (0..25)
                .map(|v| {
                    (
                        1.7e9 + v as f64 * 0.37,
                        (i as u64 * 7919 + v * 104_729) % 100_000 + 1,
                    )
                })
                .collect();
            let cart: Vec<(u64, u32)> = (0..3)
                .map(|c| ((i as u64 * 31 + c * 997) % 100_000 + 1, 1 + c as u32))
                .collect();
            pipe.hset(keys.login_of(&token), token.expose(), i + 1)
                .ignore()
                .zadd(keys.recent_of(&token), token.expose(), 1.7e9 + i as f64)
                .ignore()
                .zadd_multiple(keys.viewed_by(&token), &viewed)
                .ignore()
                .hset_multiple(keys.cart(&token), &cart)
                .ignore();
        }
        pipe.exec_async(&mut raw).await.unwrap();
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let after = used_memory(&mut raw).await;
    println!(
        "   {MEMORY_SESSIONS} sessions, 25 viewed items and 3 cart lines each: {:.0} bytes of Redis per session",
        (after - before) as f64 / MEMORY_SESSIONS as f64
    );

    let page = include_bytes!("fixtures/item_page.html");
    let stored = StoredPage::new(
        200,
        vec![("content-type".into(), b"text/html; charset=utf-8".to_vec())],
        page,
    );
    let before = used_memory(&mut raw).await;
    for i in 0..10_000 {
        let _: () = redis::cmd("SET")
            .arg(keys.page(&format!("{i:064x}")))
            .arg(stored.encode())
            .arg("PX")
            .arg(300_000)
            .query_async(&mut raw)
            .await
            .unwrap();
    }
    let after = used_memory(&mut raw).await;
    println!(
        "   10,000 cached item pages: {:.0} bytes of Redis per page (raw page {} bytes, stored value {} bytes)",
        (after - before) as f64 / 10_000.0,
        page.len(),
        stored.encode().len()
    );
}
