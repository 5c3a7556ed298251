//! Each user's index of sessions, on one node and on a
//! private 6-node cluster (3 primaries), against private servers:
//!
//! 1. "log out everywhere" for a user with 100 sessions: latency over
//!    [`REPEATS`] runs (p50, p99, max);
//! 2. exactness under churn: [`SESSIONS`] sessions of [`USERS`] users, then
//!    [`CHURN_SECS`] s of logins, logouts, ends from the devices page, "log out
//!    everywhere else", touches, the per-user cap and the cleaner at a cap below
//!    the live count, all at once; then every user's index compared with the
//!    live sessions: stale entries and missing ones (goal: 0 and 0);
//! 3. what the index adds to a login: `Sessions::login` (index entry, the move,
//!    the cap's count) against the move alone (`login.lua`, what a login was
//!    before), alternated rounds, [`LOGINS`] each, 50 callers.
//!
//! Run: `cargo bench -p shop-cache --bench user_sessions` (about three minutes;
//! `CHURN_SECS=10` for a quick look).

#![allow(missing_docs)]

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use shop_cache::RedisConn;
use shop_cache::domain::UserId;
use shop_cache::keys::Keys;
use shop_cache::session::{Device, SessionToken, Sessions, Touch, session_id};
use shop_cache::session_cleaner::SessionCleaner;
use shop_testkit::{TestRedis, TestRedisCluster};

const REPEATS: usize = 200;
const SESSIONS: usize = 100_000;
const USERS: u64 = 1_000;
const LOGINS: usize = 20_000;
const CALLERS: usize = 50;

fn churn_secs() -> u64 {
    std::env::var("CHURN_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(60)
}

fn main() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let node = TestRedis::start();
        let conn = shop_cache::connect(&node.url()).await.unwrap();
        run("one node", conn, Keys::default()).await;
        drop(node);
        let cluster = TestRedisCluster::start();
        let conn = shop_cache::connect_cluster(&cluster.addrs()).await.unwrap();
        run("cluster", conn, Keys::cluster("")).await;
    });
}

async fn run(layout: &str, conn: RedisConn, keys: Keys) {
    end_everywhere(layout, &conn, &keys).await;
    login_cost(layout, &conn, &keys).await;
    exactness(layout, &conn, &keys).await;
}

fn device(i: u64) -> Device {
    Device {
        user_agent: format!("Mozilla/5.0 (X11; Linux x86_64) Firefox/{i}"),
        network: "203.0.113.0/24".to_owned(),
    }
}

/// Logs `user` in `n` times from fresh browsers, `CALLERS` at a time.
async fn logins(sessions: &Sessions, user: UserId, n: usize) -> Vec<SessionToken> {
    let mut out = Vec::with_capacity(n);
    for chunk in (0..n).collect::<Vec<_>>().chunks(CALLERS) {
        let calls = chunk.iter().map(|&i| {
            let sessions = sessions.clone();
            async move {
                sessions
                    .login_from(&SessionToken::generate(), user, None, &device(i as u64))
                    .await
                    .unwrap()
            }
        });
        out.extend(futures::future::join_all(calls).await);
    }
    out
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len()) - 1]
}

async fn end_everywhere(layout: &str, conn: &RedisConn, keys: &Keys) {
    let sessions = Sessions::new(conn.clone(), keys.clone()).with_max_per_user(0);
    let user = UserId::new(999_999).unwrap();
    let mut took = Vec::with_capacity(REPEATS);
    for _ in 0..REPEATS {
        logins(&sessions, user, 100).await;
        let start = Instant::now();
        let ended = sessions.end_others(user, None).await.unwrap();
        took.push(start.elapsed());
        assert_eq!(ended, 100);
    }
    took.sort();
    println!(
        "{layout}: log out everywhere, 100 sessions, {REPEATS} runs: p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
        percentile(&took, 0.5).as_secs_f64() * 1e3,
        percentile(&took, 0.99).as_secs_f64() * 1e3,
        took.last().unwrap().as_secs_f64() * 1e3,
    );
}

/// Logins per second from `CALLERS` callers: `full` through `Sessions::login`,
/// else the move alone (the login script, as before the index). Users `first..`
/// of their own, a login or two each: the cap's listing is not what is measured.
async fn logins_per_second(
    sessions: &Sessions,
    conn: &RedisConn,
    keys: &Keys,
    full: bool,
    first: u64,
) -> f64 {
    let next = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let callers = (0..CALLERS).map(|_| {
        let (sessions, conn, keys, next) =
            (sessions.clone(), conn.clone(), keys.clone(), next.clone());
        tokio::spawn(async move {
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= LOGINS as u64 {
                    break;
                }
                let user = UserId::new(first + i / 2).unwrap();
                let old = SessionToken::generate();
                if full {
                    sessions
                        .login_from(&old, user, None, &device(i))
                        .await
                        .unwrap();
                } else {
                    let new = keys.fresh_token_beside(&old);
                    shop_cache::session::login_move(&keys, &old, &new, user)
                        .invoke_async::<Option<String>>(&mut conn.clone())
                        .await
                        .unwrap();
                }
            }
        })
    });
    futures::future::join_all(callers).await;
    LOGINS as f64 / start.elapsed().as_secs_f64()
}

async fn login_cost(layout: &str, conn: &RedisConn, keys: &Keys) {
    let sessions = Sessions::new(conn.clone(), keys.clone());
    let (mut before, mut after) = (Vec::new(), Vec::new());
    for round in 0..3u64 {
        let first = 2_000_000 + round * LOGINS as u64;
        before.push(logins_per_second(&sessions, conn, keys, false, first).await);
        after.push(logins_per_second(&sessions, conn, keys, true, first).await);
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let (b, a) = (median(&mut before), median(&mut after));
    println!(
        "{layout}: logins/s, {CALLERS} callers, median of 3 alternated rounds of {LOGINS}: the move alone (before) {b:.0}, with the index and the cap's count (now) {a:.0}: {:.2}x",
        a / b
    );
    // A login past the cap: the user's listing and one session ended besides.
    let capped = Sessions::new(conn.clone(), keys.clone()).with_max_per_user(20);
    let user = UserId::new(1_900_000).unwrap();
    logins(&capped, user, 20).await;
    let start = Instant::now();
    for i in 0..1_000 {
        capped
            .login_from(&SessionToken::generate(), user, None, &device(i))
            .await
            .unwrap();
    }
    println!(
        "{layout}: a login past the cap of 20 (one caller): {:.3} ms each",
        start.elapsed().as_secs_f64()
    );
}

async fn exactness(layout: &str, conn: &RedisConn, keys: &Keys) {
    let sessions = Sessions::new(conn.clone(), keys.clone()).with_max_per_user(120);
    // The sessions to start from: 100 per user.
    let start = Instant::now();
    let per_user = SESSIONS / USERS as usize;
    // Users of their own: the login-cost rounds before left sessions of users
    // 1..=USERS behind, some (the move alone) not indexed on purpose.
    let users: Vec<UserId> = (1..=USERS)
        .map(|u| UserId::new(1_000_000 + u).unwrap())
        .collect();
    for chunk in users.chunks(10) {
        let calls = chunk.iter().map(|&u| {
            let sessions = sessions.clone();
            async move { logins(&sessions, u, per_user).await }
        });
        futures::future::join_all(calls).await;
    }
    let live_before = sessions.count().await.unwrap();
    println!(
        "{layout}: churn: {SESSIONS} sessions of {USERS} users made in {:.1} s ({live_before} sessions in Redis with the earlier parts')",
        start.elapsed().as_secs_f64()
    );
    let stop = Arc::new(AtomicBool::new(false));
    let ops = Arc::new(AtomicU64::new(0));
    // The cleaner at a cap below the live count, running all along.
    let cleaner = {
        let cleaner =
            SessionCleaner::new(conn.clone(), keys.clone(), (SESSIONS as u64) * 8 / 10, 100)
                .unwrap();
        let stop = stop.clone();
        tokio::spawn(async move {
            let mut removed = 0;
            while !stop.load(Ordering::Relaxed) {
                match cleaner.step().await.unwrap() {
                    shop_cache::session_cleaner::CleanerStep::Cleaned(n) => removed += n,
                    shop_cache::session_cleaner::CleanerStep::Idle => {
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                }
            }
            removed
        })
    };
    let workers: Vec<_> = (0..CALLERS as u64)
        .map(|w| {
            let (sessions, users, stop, ops) =
                (sessions.clone(), users.clone(), stop.clone(), ops.clone());
            let (conn, keys) = (conn.clone(), keys.clone());
            tokio::spawn(async move {
                let mut n: u64 = w * 7919;
                while !stop.load(Ordering::Relaxed) {
                    n = n
                        .wrapping_mul(6364136223846793005)
                        .wrapping_add(1442695040888963407);
                    let user = users[((n >> 33) % users.len() as u64) as usize];
                    let roll = (n >> 20) % 100;
                    let mine = sessions.sessions_of(user).await.unwrap();
                    let pick = (!mine.is_empty()).then(|| &mine[((n >> 40) as usize) % mine.len()]);
                    match (roll, pick) {
                        (0..40, _) | (_, None) => {
                            sessions
                                .login_from(&SessionToken::generate(), user, None, &device(n % 50))
                                .await
                                .unwrap();
                        }
                        (40..55, Some(s)) => {
                            sessions.end_session(user, &s.id).await.unwrap();
                        }
                        (55..58, Some(_)) => {
                            let keep = mine.first().map(|s| s.id.clone());
                            // "log out everywhere else", from the most recent one.
                            if let Some(keep) = keep {
                                let kept: Vec<_> = mine.iter().filter(|s| s.id != keep).collect();
                                for s in kept {
                                    sessions.end_session(user, &s.id).await.unwrap();
                                }
                            }
                        }
                        (58..78, Some(s)) => {
                            // A logout needs the token: as the browser holding it would.
                            let token = token_of(&conn, &keys, user, &s.id).await;
                            if let Some(token) = token {
                                sessions.logout(&token).await.unwrap();
                            }
                        }
                        (_, Some(s)) => {
                            if let Some(token) = token_of(&conn, &keys, user, &s.id).await {
                                sessions.touch(&token, Touch::request()).await.unwrap();
                            }
                        }
                    }
                    ops.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_secs(churn_secs())).await;
    stop.store(true, Ordering::Relaxed);
    futures::future::join_all(workers).await;
    let removed = cleaner.await.unwrap();
    let (stale, missing, live) = compare(conn, keys, &users).await;
    println!(
        "{layout}: churn for {} s: {} operations, the cleaner removed {removed}; then {live} live sessions: {stale} stale index entries, {missing} missing",
        churn_secs(),
        ops.load(Ordering::Relaxed)
    );
}

/// The token behind a session id, read from the index as only the shop can (a
/// browser holds its own token; this stands in for it).
async fn token_of(conn: &RedisConn, keys: &Keys, user: UserId, id: &str) -> Option<SessionToken> {
    let entry: Option<String> = redis::cmd("HGET")
        .arg(keys.user_sessions(user))
        .arg(id)
        .query_async(&mut conn.clone())
        .await
        .unwrap();
    entry?.split('\t').next()?.parse().ok()
}

/// Every user's index against the live logged-in sessions: (stale entries,
/// missing entries, live logged-in sessions).
async fn compare(conn: &RedisConn, keys: &Keys, users: &[UserId]) -> (u64, u64, u64) {
    let mut raw = conn.clone();
    // The live sessions: every login: entry, per shard.
    let mut live: HashMap<String, String> = HashMap::new();
    for shard in keys.shards() {
        let all: Vec<(String, String)> = redis::cmd("HGETALL")
            .arg(keys.login_in(shard))
            .query_async(&mut raw)
            .await
            .unwrap();
        live.extend(all);
    }
    let mut listed: HashSet<(String, String)> = HashSet::new();
    let mut stale = 0;
    for &user in users {
        let entries: Vec<(String, String)> = redis::cmd("HGETALL")
            .arg(keys.user_sessions(user))
            .query_async(&mut raw)
            .await
            .unwrap();
        for (id, entry) in entries {
            let token = entry.split('\t').next().unwrap_or("").to_owned();
            if live.get(&token) == Some(&user.to_string()) {
                listed.insert((id, user.to_string()));
            } else {
                stale += 1;
            }
        }
    }
    let ours: HashSet<String> = users.iter().map(|u| u.to_string()).collect();
    live.retain(|_, user| ours.contains(user));
    let mut missing = 0;
    for (token, user) in &live {
        let id = session_id(&token.parse().unwrap());
        if !listed.contains(&(id, user.clone())) {
            missing += 1;
        }
    }
    (stale, missing, live.len() as u64)
}
