//! Whole-workload measurements that criterion's adaptive iterations do not fit, each
//! against a private redis-server and each next to its baseline in the same run:
//!
//! 1. the Redis ceiling: the book's five `update_token` commands as a plain pipeline
//!    over 50 connections straight through redis-rs, against the shop's `touch` from
//!    50 concurrent callers sharing one shop handle, with one connection and with
//!    a pool of 4 connections (`--redis-pool 4`); their ratios;
//! 2. the session cleaner: sessions removed per second, the shop's atomic script
//!    (batch 100 and 1,000) against the book's five-command rounds;
//! 3. memory: Redis bytes per session (25 viewed items, 3 cart lines) over 100,000
//!    sessions written by the shop's own `touch` and `Carts::set`, from `INFO memory`,
//!    with each structure's share measured alone; and bytes per cached item page.
//!
//! Run: `cargo bench -p shop-cache --bench throughput` (about a minute);
//! `PARTS=cleaner` (or `ceiling`, `memory`, comma-separated) runs only those parts;
//! in the cleaner's part, `WAYS=book,100,1000` picks the ways (the default; add
//! `indexed` for batch 100 on sessions logged in by the shop, each in its user's
//! index) and `COMMANDSTATS=1` prints Redis's time per command.

#![allow(missing_docs)]

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use redis::AsyncCommands;
use redis::aio::MultiplexedConnection;
use shop_cache::RedisConn;
use shop_cache::book;
use shop_cache::domain::{ItemId, UserId};
use shop_cache::keys::Keys;
use shop_cache::session::{HISTORY_LEN, SessionToken, Sessions, Touch};
use shop_cache::session_cleaner::{CleanerStep, SessionCleaner};
use shop_testkit::TestRedis;

const CALLERS: usize = 50;
const TOUCHES: u64 = 200_000;
/// Rounds of the touch comparison, alternated (the machine's speed drifts).
const ROUNDS: usize = 5;
const SESSIONS_TO_CLEAN: usize = 200_000;
const MEMORY_SESSIONS: usize = 100_000;
/// A typical browser's user agent, as the index stores it.
const AGENT: &str = "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.0.0 Safari/537.36";

fn main() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    // `PARTS=cleaner,memory` runs only those parts (default: all three).
    let parts = std::env::var("PARTS").unwrap_or_else(|_| "ceiling,cleaner,memory".into());
    let run = |part: &str| parts.split(',').any(|p| p.trim() == part);
    rt.block_on(async {
        if run("ceiling") {
            ceiling().await;
        }
        if run("cleaner") {
            cleaner().await;
        }
        if run("memory") {
            memory().await;
        }
    });
}

/// CPU seconds used so far: Redis's (`INFO cpu`) and this process's (`/proc`).
async fn cpu(conn: &mut MultiplexedConnection) -> (f64, f64) {
    let info: String = redis::cmd("INFO")
        .arg("cpu")
        .query_async(conn)
        .await
        .unwrap();
    let field = |name: &str| -> f64 {
        info.lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().parse().ok())
            .unwrap()
    };
    let redis = field("used_cpu_user:") + field("used_cpu_sys:");
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap();
    // Fields after the command name in parentheses; utime and stime are 14 and 15.
    let rest = &stat[stat.rfind(')').unwrap() + 2..];
    let f: Vec<f64> = rest.split(' ').map(|v| v.parse().unwrap_or(0.0)).collect();
    let ticks = 100.0; // sysconf(_SC_CLK_TCK) on Linux
    (redis, (f[11] + f[12]) / ticks)
}

/// Runs `way` and prints where its time went: Redis CPU and this process's CPU per
/// call (the profile of the ratio: which of the two is the limit).
async fn profiled<Fut: std::future::Future<Output = f64>>(
    conn: &mut MultiplexedConnection,
    way: Fut,
) -> (f64, f64, f64) {
    let (r0, c0) = cpu(conn).await;
    let rate = way.await;
    let (r1, c1) = cpu(conn).await;
    let per = |s: f64| s * 1e6 / TOUCHES as f64;
    (rate, per(r1 - r0), per(c1 - c0))
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
    let config = shop_cache::connection::default_config;
    let single = Sessions::new(
        shop_cache::connect_pooled(&server.url(), config(), 1)
            .await
            .unwrap(),
        keys.clone(),
    );
    let pool = 4;
    let pooled = Sessions::new(
        shop_cache::connect_pooled(&server.url(), config(), pool)
            .await
            .unwrap(),
        keys.clone(),
    );
    let mut probe = server.conn().await;

    println!(
        "== 1. session touch at {CALLERS} concurrent callers ({TOUCHES} each way, alternated {ROUNDS} times)"
    );
    let mut best = (0.0f64, 0.0f64, 0.0f64);
    let mut ratios: [Vec<f64>; 2] = [Vec::new(), Vec::new()];
    for round in 1..=ROUNDS {
        let (k, t, c) = (keys.clone(), tokens.clone(), conns.clone());
        let (pipeline, p_redis, p_client) = profiled(
            &mut probe,
            concurrently(move |caller, n| {
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
            }),
        )
        .await;
        let mut shop = [0.0f64; 2];
        let mut costs = [(0.0, 0.0); 2];
        for (i, sessions) in [&single, &pooled].into_iter().enumerate() {
            let (s, t) = (sessions.clone(), tokens.clone());
            let (rate, r, c) = profiled(
                &mut probe,
                concurrently(move |_, n| {
                    let (s, t) = (s.clone(), t.clone());
                    async move {
                        let (token, user, item) = pick(n, &t);
                        s.touch(&token, Touch::request().as_user(user).view(item))
                            .await
                            .unwrap();
                    }
                }),
            )
            .await;
            shop[i] = rate;
            costs[i] = (r, c);
        }
        println!(
            "   round {round}: book pipeline over {CALLERS} connections {pipeline:>9.0}/s | shop touch, 1 connection {:>9.0}/s ({:.2}x) | pool of {pool} {:>9.0}/s ({:.2}x)",
            shop[0],
            shop[0] / pipeline,
            shop[1],
            shop[1] / pipeline
        );
        println!(
            "      CPU per call (Redis / this process): pipeline {p_redis:.1} / {p_client:.1} us | touch, 1 connection {:.1} / {:.1} us | pool {:.1} / {:.1} us",
            costs[0].0, costs[0].1, costs[1].0, costs[1].1
        );
        ratios[0].push(shop[0] / pipeline);
        ratios[1].push(shop[1] / pipeline);
        best = (
            best.0.max(pipeline),
            best.1.max(shop[0]),
            best.2.max(shop[1]),
        );
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    println!(
        "   best of {ROUNDS}: ceiling {:.0}/s, shop on 1 connection {:.0}/s ({:.2}x), on a pool of {pool} {:.0}/s ({:.2}x)",
        best.0,
        best.1,
        best.1 / best.0,
        best.2,
        best.2 / best.0
    );
    println!(
        "   median of the rounds' ratios: 1 connection {:.2}x, pool of {pool} {:.2}x\n",
        median(&mut ratios[0]),
        median(&mut ratios[1])
    );
}

/// `n` sessions with a login, 3 viewed items and 2 cart lines each, seen in the
/// last `n` milliseconds, oldest first (recent enough that no lifetime has run
/// out: the cleaner removes them for the cap, the path measured). Logged in as the
/// book's code does (`login:` only), or, with `shop_logins`, as the shop does:
/// with a login time and an entry in the user's index, which the cleaner must
/// take out too.
async fn populate(conn: &mut MultiplexedConnection, keys: &Keys, n: usize, shop_logins: bool) {
    let start = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
        - n as f64 / 1_000.0;
    for chunk in (0..n).collect::<Vec<_>>().chunks(1_000) {
        let mut pipe = redis::pipe();
        for &i in chunk {
            let token = SessionToken::generate();
            pipe.hset(keys.login_of(&token), token.expose(), i + 1)
                .ignore()
                .zadd(
                    keys.recent_of(&token),
                    token.expose(),
                    start + i as f64 / 1_000.0,
                )
                .ignore()
                .zadd_multiple(keys.viewed_by(&token), &[(1.0, 1), (2.0, 2), (3.0, 3)])
                .ignore()
                .hset_multiple(keys.cart(&token), &[(1, 1), (2, 2)])
                .ignore();
            if shop_logins {
                let user = UserId::new(i as u64 + 1).unwrap();
                pipe.zadd(keys.logins_of(&token), token.expose(), start)
                    .ignore()
                    .hset(
                        keys.user_sessions(user),
                        shop_cache::session::session_id(&token),
                        index_entry(&token, start),
                    )
                    .ignore();
            }
        }
        pipe.exec_async(conn).await.unwrap();
    }
}

async fn cleaner() {
    println!(
        "== 2. session cleaner, {SESSIONS_TO_CLEAN} sessions (login, 3 views, 2 cart lines each), cap 0"
    );
    let keys = Keys::default();
    for (way, name, batch) in [
        ("book", "book, 5 commands a round", 100),
        ("100", "shop script, batch 100", 100),
        ("1000", "shop script, batch 1000", 1_000),
        ("indexed", "the same, shop logins", 100),
    ] {
        // `WAYS=book,100` runs only those ways (the book's, the shop's at a batch;
        // `indexed`: batch 100, sessions logged in by the shop, so each is in its
        // user's index too). The default: all but `indexed`.
        let ways = std::env::var("WAYS").unwrap_or_else(|_| "book,100,1000".into());
        if !ways.split(',').any(|w| w.trim() == way) {
            continue;
        }
        let server = TestRedis::start();
        let mut raw = server.conn().await;
        populate(&mut raw, &keys, SESSIONS_TO_CLEAN, way == "indexed").await;
        let mut conn: RedisConn = shop_cache::connect(&server.url()).await.unwrap();
        redis::cmd("CONFIG")
            .arg("RESETSTAT")
            .exec_async(&mut raw)
            .await
            .unwrap();
        let (redis_before, client_before) = cpu(&mut raw).await;
        let sent_before = conn.commands_sent();
        let started = Instant::now();
        let mut removed = 0;
        if way == "book" {
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
            let cleaner = SessionCleaner::new(conn.clone(), keys.clone(), 0, batch as u32).unwrap();
            while let CleanerStep::Cleaned(n) = cleaner.step().await.unwrap() {
                removed += n;
            }
        }
        let secs = started.elapsed().as_secs_f64();
        let (redis_after, client_after) = cpu(&mut raw).await;
        assert_eq!(removed as usize, SESSIONS_TO_CLEAN);
        if way != "book" {
            // Everything a session owned is gone, its users' index entry too.
            let left: u64 = redis::cmd("DBSIZE").query_async(&mut raw).await.unwrap();
            assert_eq!(left, 0, "keys left after cleaning");
        }
        println!(
            "   {name:<26} {:>9.0} sessions/s | Redis CPU {:.2} us a session | cleaner's CPU {:.2} us | {:.2} commands sent a session",
            removed as f64 / secs,
            (redis_after - redis_before) * 1e6 / removed as f64,
            (client_after - client_before) * 1e6 / removed as f64,
            (conn.commands_sent() - sent_before) as f64 / removed as f64
        );
        if std::env::var_os("COMMANDSTATS").is_some() {
            print_commandstats(&mut raw, removed as f64).await;
        }
    }
    println!();
}

/// With `COMMANDSTATS=1`: Redis's own time per command (`INFO commandstats`, which
/// counts the commands a script runs too), per removed session, largest first.
async fn print_commandstats(raw: &mut MultiplexedConnection, per: f64) {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(raw)
        .await
        .unwrap();
    let mut rows: Vec<(String, f64, f64)> = info
        .lines()
        .filter_map(|line| {
            let (name, fields) = line.strip_prefix("cmdstat_")?.split_once(':')?;
            let field = |f: &str| -> Option<f64> {
                fields
                    .split(',')
                    .find_map(|kv| kv.strip_prefix(f)?.strip_prefix('='))?
                    .parse()
                    .ok()
            };
            Some((name.to_string(), field("calls")?, field("usec")?))
        })
        .collect();
    rows.sort_by(|a, b| b.2.total_cmp(&a.2));
    for (name, calls, usec) in rows.iter().take(12) {
        println!(
            "      {name:<16} {:>7.3} calls {:>6.2} us a session",
            calls / per,
            usec / per
        );
    }
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

/// One of the structures a session is made of, for the memory breakdown.
#[derive(Clone, Copy, PartialEq)]
enum Part {
    Login,
    Recent,
    Viewed,
    Cart,
    /// The guest list (`guests:`): a session neither logged in nor holding a cart.
    Guest,
    /// When the session logged in (`logins:`).
    LoginTime,
    /// The session's entry in its user's index (`user-sessions:<user>`, one user a
    /// session: the most it costs), with a typical device.
    Index,
}

/// Writes `MEMORY_SESSIONS` sessions' `parts` (as the shop's scripts write them: the
/// history's scores are the sequence numbers 1..=25 `touch` gives a session's first
/// 25 views) into an empty Redis and returns the bytes each session took.
async fn bytes_per_session(raw: &mut MultiplexedConnection, keys: &Keys, parts: &[Part]) -> f64 {
    let _: () = redis::cmd("FLUSHALL").query_async(raw).await.unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    let before = used_memory(raw).await;
    for chunk in (0..MEMORY_SESSIONS).collect::<Vec<_>>().chunks(500) {
        let mut pipe = redis::pipe();
        for &i in chunk {
            let token = SessionToken::generate();
            if parts.contains(&Part::Login) {
                pipe.hset(keys.login_of(&token), token.expose(), i + 1)
                    .ignore();
            }
            if parts.contains(&Part::Recent) {
                pipe.zadd(
                    keys.recent_of(&token),
                    token.expose(),
                    1.7e9 + i as f64 * 0.37,
                )
                .ignore();
            }
            if parts.contains(&Part::Viewed) {
                let viewed: Vec<(u64, u64)> = (0..25)
                    .map(|v| (v + 1, (i as u64 * 7919 + v * 104_729) % 100_000 + 1))
                    .collect();
                pipe.zadd_multiple(keys.viewed_by(&token), &viewed).ignore();
            }
            if parts.contains(&Part::Guest) {
                pipe.zadd(
                    keys.guests_of(&token),
                    token.expose(),
                    1.7e9 + i as f64 * 0.37,
                )
                .ignore();
            }
            if parts.contains(&Part::LoginTime) {
                pipe.zadd(
                    keys.logins_of(&token),
                    token.expose(),
                    1.7e9 + i as f64 * 0.29,
                )
                .ignore();
            }
            if parts.contains(&Part::Index) {
                let user = UserId::new(i as u64 + 1).unwrap();
                pipe.hset(
                    keys.user_sessions(user),
                    shop_cache::session::session_id(&token),
                    index_entry(&token, 1.7e9 + i as f64 * 0.29),
                )
                .ignore();
            }
            if parts.contains(&Part::Cart) {
                let cart: Vec<(u64, u32)> = (0..3)
                    .map(|c| ((i as u64 * 31 + c * 997) % 100_000 + 1, 1 + c as u32))
                    .collect();
                pipe.hset_multiple(keys.cart(&token), &cart).ignore();
            }
        }
        pipe.exec_async(raw).await.unwrap();
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    (used_memory(raw).await - before) as f64 / MEMORY_SESSIONS as f64
}

/// A session's entry in its user's index, as a login writes it, from a typical
/// device.
fn index_entry(token: &SessionToken, since: f64) -> String {
    format!("{}\t{since:.3}\t203.0.113.0/24\t{AGENT}", token.expose())
}

async fn memory() {
    println!("== 3. memory");
    let server = TestRedis::start();
    let mut raw = server.conn().await;
    let keys = Keys::default();

    // The bench writes the structures directly (100,000 sessions through `touch`
    // would take a minute); first check that they are what the shop writes: one
    // session's 25 views through `touch` and 3 lines through `Carts::set`.
    let shop = shop_cache::connect(&server.url()).await.unwrap();
    let sessions = Sessions::new(shop.clone(), keys.clone());
    let carts = shop_cache::cart::Carts::new(shop, keys.clone(), 99);
    let token = SessionToken::generate();
    let user = UserId::new(7).unwrap();
    for v in 0..25u64 {
        let item = ItemId::new((v * 104_729) % 100_000 + 1).unwrap();
        sessions
            .touch(&token, Touch::request().as_user(user).view(item))
            .await
            .unwrap();
    }
    for c in 0..3u64 {
        let item = ItemId::new((c * 997) % 100_000 + 1).unwrap();
        carts.set(&token, item, 1 + c as i64).await.unwrap();
    }
    let scores: Vec<(u64, f64)> = raw
        .zrange_withscores(keys.viewed_by(&token), 0, -1)
        .await
        .unwrap();
    let expected: Vec<f64> = (1..=25).map(|s| s as f64).collect();
    assert_eq!(
        scores.iter().map(|(_, s)| *s).collect::<Vec<_>>(),
        expected,
        "touch no longer numbers a session's views 1, 2, 3...: update this bench"
    );
    let cart_len: u64 = raw.hlen(keys.cart(&token)).await.unwrap();
    assert_eq!(cart_len, 3);

    use Part::*;
    let whole = bytes_per_session(&mut raw, &keys, &[Login, Recent, Viewed, Cart]).await;
    println!(
        "   {MEMORY_SESSIONS} sessions, 25 viewed items and 3 cart lines each: {whole:.0} bytes of Redis per session"
    );
    for (name, part) in [
        ("login: (token -> user)", Login),
        ("recent: (token -> last seen)", Recent),
        ("viewed:<token> (25 items)", Viewed),
        ("cart:<token> (3 lines)", Cart),
        ("guests: (a guest's entry)", Guest),
        ("logins: (when it logged in)", LoginTime),
        ("user-sessions:<user> (entry)", Index),
    ] {
        let bytes = bytes_per_session(&mut raw, &keys, &[part]).await;
        println!("     of which {name:<30} {bytes:>6.0} bytes");
    }
    // Each kind of session as the shop writes it today: a guest's is listed in
    // guests:, a cart takes it out; only a login writes login:, logins: and the
    // user's index.
    for (name, parts) in [
        ("a guest (history only)", &[Recent, Guest, Viewed][..]),
        (
            "a shopper with a cart, not logged in",
            &[Recent, Viewed, Cart][..],
        ),
        (
            "a logged-in shopper with a cart",
            &[Recent, Login, LoginTime, Index, Viewed, Cart][..],
        ),
    ] {
        let bytes = bytes_per_session(&mut raw, &keys, parts).await;
        println!("   {name:<40} {bytes:>6.0} bytes a session");
    }
    let _: () = redis::cmd("FLUSHALL").query_async(&mut raw).await.unwrap();

    // What the page cache stores for it: the page gzip-compressed (its entry's
    // header and replayed headers add about 100 bytes).
    let page = include_bytes!("../../shop-page-cache/benches/fixtures/item_page.html");
    let mut gzip = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    std::io::Write::write_all(&mut gzip, page).unwrap();
    let stored = gzip.finish().unwrap();
    let before = used_memory(&mut raw).await;
    for i in 0..10_000 {
        let _: () = redis::cmd("SET")
            .arg(keys.named(format_args!("cache:{i:064x}")))
            .arg(&stored)
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
        stored.len()
    );
}
