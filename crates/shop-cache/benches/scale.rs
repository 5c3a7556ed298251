//! The cost curve's Redis parts, one phase per run against a
//! redis-server that `scripts/bench-scale` starts for each size and passes in
//! `SCALE_REDIS` (one node, the book's layout):
//!
//! - `PHASE=fill SESSIONS=N`: writes N live sessions as the shop writes them, each
//!   with a history of 25 items (the sequence numbers the touch gives), a third of
//!   them with a cart of 3 lines (shoppers), the rest listed in `guests:`, all seen
//!   within the last hour, oldest first; by a Lua loop inside Redis, 20,000
//!   sessions a call (through HTTP it would take hours at 10 million);
//!   then measures: Redis memory per session (`used_memory` over the sessions,
//!   once it has settled); the fork a retailer will see: `BGSAVE` and
//!   `BGREWRITEAOF` (wall time, the fork's own stall `latest_fork_usec`, the
//!   copy-on-write, the file's size); the shop's touch (`Sessions::touch`, an item
//!   view) at 50 concurrent callers on one connection, on random existing sessions;
//! - `PHASE=clean`: the cleaner's sessions/s at the cap (a cap 10% under the count,
//!   at most 100,000 under it; unpaced steps at the daemon's batch of 100), as the
//!   daemon meets a backlog: guests first.
//!
//! Each phase prints one JSON object on a line starting with `scale: ` for the
//! script to collect. Not a criterion bench: run it through `scripts/bench-scale`.

#![allow(missing_docs)]

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use redis::aio::MultiplexedConnection;
use shop_cache::domain::ItemId;
use shop_cache::keys::Keys;
use shop_cache::session::{SessionToken, Sessions, Touch};
use shop_cache::session_cleaner::{CleanerStep, SessionCleaner};

const CHUNK: u64 = 20_000;
const CALLERS: usize = 50;
const TOUCHES: u64 = 200_000;

/// Writes sessions `ARGV[1]` .. `ARGV[1] + ARGV[2]` (exclusive); see the module docs.
/// ARGV[3] the first session's last-seen time, ARGV[4] the step between sessions;
/// ARGV[5..] the key names: recent:, guests:, and what goes before a token in
/// viewed:<token> and cart:<token>. Tokens are the session's number in 21 digits and
/// an `A`: 22 characters that parse as a session token.
const FILL: &str = r#"
local first, n = tonumber(ARGV[1]), tonumber(ARGV[2])
local t0, step = tonumber(ARGV[3]), tonumber(ARGV[4])
local recent, guests, viewed, cart = ARGV[5], ARGV[6], ARGV[7], ARGV[8]
local history = {}
for i = first, first + n - 1 do
  local token = string.format('%021dA', i)
  local seen = string.format('%.6f', t0 + i * step)
  redis.call('ZADD', recent, seen, token)
  for v = 1, 25 do
    history[2 * v - 1] = v
    history[2 * v] = (i * 7919 + v * 104729) % 100000 + 1
  end
  redis.call('ZADD', viewed .. token, unpack(history))
  if i % 3 == 0 then
    redis.call('HSET', cart .. token, (i * 31) % 100000 + 1, 1,
      (i * 31 + 997) % 100000 + 1, 2, (i * 31 + 1994) % 100000 + 1, 3)
  else
    redis.call('ZADD', guests, seen, token)
  end
end
return n
"#;

fn token(i: u64) -> SessionToken {
    format!("{i:0>21}A").parse().expect("a well-formed token")
}

fn emit(phase: &str, fields: serde_json::Value) {
    let mut obj = fields;
    obj["phase"] = phase.into();
    println!("scale: {obj}");
}

async fn info(conn: &mut MultiplexedConnection, section: &str) -> String {
    redis::cmd("INFO")
        .arg(section)
        .query_async(conn)
        .await
        .expect("INFO")
}

fn field(info: &str, name: &str) -> Option<f64> {
    info.lines()
        .find_map(|l| l.strip_prefix(&format!("{name}:")))
        .and_then(|v| v.trim().parse().ok())
}

/// `used_memory` once it has stopped moving (the dictionaries' incremental rehash
/// done): three readings 500 ms apart within 0.1%, or after a minute.
async fn settled_memory(conn: &mut MultiplexedConnection) -> f64 {
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut last = Vec::new();
    loop {
        let used = field(&info(conn, "memory").await, "used_memory").unwrap();
        last.push(used);
        if last.len() >= 3 {
            let w = &last[last.len() - 3..];
            let (lo, hi) = (
                w.iter().cloned().fold(f64::MAX, f64::min),
                w.iter().cloned().fold(0.0, f64::max),
            );
            if hi - lo <= hi * 0.001 || Instant::now() > deadline {
                return used;
            }
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Starts a background save or AOF rewrite and waits for it to end: its wall time,
/// the fork's stall, the copy-on-write and the file's size.
async fn fork_cost(conn: &mut MultiplexedConnection, what: &str) -> serde_json::Value {
    let (start_cmd, in_progress, cow, file) = match what {
        "bgsave" => (
            "BGSAVE",
            "rdb_bgsave_in_progress",
            "rdb_last_cow_size",
            "dump.rdb",
        ),
        _ => (
            "BGREWRITEAOF",
            "aof_rewrite_in_progress",
            "aof_last_cow_size",
            "appendonlydir",
        ),
    };
    let started = Instant::now();
    let _: String = redis::cmd(start_cmd)
        .query_async(conn)
        .await
        .expect("a background save or rewrite");
    loop {
        tokio::time::sleep(Duration::from_millis(20)).await;
        let p = info(conn, "persistence").await;
        let busy =
            field(&p, in_progress) == Some(1.0) || field(&p, "aof_rewrite_scheduled") == Some(1.0);
        if !busy {
            let took = started.elapsed().as_secs_f64();
            let fork = field(&info(conn, "stats").await, "latest_fork_usec").unwrap_or(0.0);
            let dir: Vec<String> = redis::cmd("CONFIG")
                .arg("GET")
                .arg("dir")
                .query_async(conn)
                .await
                .unwrap();
            let path = std::path::Path::new(&dir[1]).join(file);
            let bytes = dir_size(&path);
            return serde_json::json!({
                "seconds": took,
                "fork_ms": fork / 1000.0,
                "cow_bytes": field(&p, cow).unwrap_or(0.0),
                "file_bytes": bytes,
            });
        }
    }
}

fn dir_size(path: &std::path::Path) -> u64 {
    match std::fs::metadata(path) {
        Ok(m) if m.is_dir() => std::fs::read_dir(path)
            .map(|d| d.flatten().map(|e| dir_size(&e.path())).sum())
            .unwrap_or(0),
        Ok(m) => m.len(),
        Err(_) => 0,
    }
}

async fn sessions_now(conn: &mut MultiplexedConnection, keys: &Keys) -> u64 {
    redis::cmd("ZCARD")
        .arg(keys.recent_of(&token(0)))
        .query_async(conn)
        .await
        .unwrap()
}

async fn fill(conn: &mut MultiplexedConnection, keys: &Keys, n: u64) -> f64 {
    let t = token(0);
    let viewed = keys.viewed_by(&t);
    let cart = keys.cart(&t);
    let prefix = |k: &str| k.strip_suffix(t.expose()).unwrap().to_owned();
    let shard = keys.shard_of(&t);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    let first_seen = now - 3_600.0;
    let step = 3_000.0 / n as f64;
    let before = settled_memory(conn).await;
    let started = Instant::now();
    let mut done = 0;
    while done < n {
        let count = CHUNK.min(n - done);
        let _: u64 = redis::cmd("EVAL")
            .arg(FILL)
            .arg(0)
            .arg(done)
            .arg(count)
            .arg(first_seen)
            .arg(step)
            .arg(keys.recent_in(shard))
            .arg(keys.guests_in(shard))
            .arg(prefix(&viewed))
            .arg(prefix(&cart))
            .query_async(conn)
            .await
            .expect("the fill script");
        done += count;
    }
    let secs = started.elapsed().as_secs_f64();
    emit(
        "fill",
        serde_json::json!({
            "sessions": n,
            "seconds": secs,
            "empty_used_memory": before,
        }),
    );
    before
}

async fn measure(conn: &mut MultiplexedConnection, url: &str, keys: &Keys, empty: f64) {
    let n = sessions_now(conn, keys).await;
    let used = settled_memory(conn).await;
    let mem = info(conn, "memory").await;
    emit(
        "memory",
        serde_json::json!({
            "sessions": n,
            "used_memory": used,
            "bytes_per_session": (used - empty) / n as f64,
            "rss": field(&mem, "used_memory_rss"),
        }),
    );
    let save = fork_cost(conn, "bgsave").await;
    emit("bgsave", save);
    let rewrite = fork_cost(conn, "aof").await;
    emit("aofrewrite", rewrite);

    let sessions = Sessions::new(shop_cache::connect(url).await.unwrap(), keys.clone());
    let next = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..CALLERS {
        let (sessions, next) = (sessions.clone(), next.clone());
        tasks.spawn(async move {
            loop {
                let k = next.fetch_add(1, Ordering::Relaxed);
                if k >= TOUCHES {
                    return;
                }
                let mix = k.wrapping_mul(0x9E37_79B9_7F4A_7C15);
                let t = token(mix % n);
                let item = ItemId::new((mix >> 24) % 100_000 + 1).unwrap();
                sessions
                    .touch(&t, Touch::request().view(item))
                    .await
                    .expect("a touch");
            }
        });
    }
    while tasks.join_next().await.is_some() {}
    let secs = started.elapsed().as_secs_f64();
    emit(
        "touch",
        serde_json::json!({
            "callers": CALLERS,
            "touches": TOUCHES,
            "per_second": TOUCHES as f64 / secs,
        }),
    );
}

async fn clean(conn: &mut MultiplexedConnection, url: &str, keys: &Keys) {
    let n = sessions_now(conn, keys).await;
    let excess = (n / 10).min(100_000);
    let shop = shop_cache::connect(url).await.unwrap();
    let cleaner = SessionCleaner::new(shop, keys.clone(), n - excess, 100).unwrap();
    let started = Instant::now();
    let mut removed = 0;
    while let CleanerStep::Cleaned(k) = cleaner.step().await.expect("a cleaner step") {
        removed += k;
    }
    let secs = started.elapsed().as_secs_f64();
    assert_eq!(removed, excess, "the cleaner removed the excess, no more");
    emit(
        "clean",
        serde_json::json!({
            "sessions": n,
            "removed": removed,
            "per_second": removed as f64 / secs,
        }),
    );
}

fn main() {
    // `cargo bench` runs every bench target with `--bench`: this one only runs
    // when the script sets it up.
    let Ok(url) = std::env::var("SCALE_REDIS") else {
        eprintln!("bench scale: run it through scripts/bench-scale (SCALE_REDIS is not set)");
        return;
    };
    let phase = std::env::var("PHASE").unwrap_or_default();
    let keys = Keys::default();
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        // Script calls of 20,000 sessions and INFO during a fork take their time.
        let config = redis::AsyncConnectionConfig::new()
            .set_response_timeout(Some(Duration::from_secs(120)));
        let mut conn = redis::Client::open(url.as_str())
            .unwrap()
            .get_multiplexed_async_connection_with_config(&config)
            .await
            .unwrap();
        match phase.as_str() {
            "fill" => {
                let n = std::env::var("SESSIONS").unwrap().parse().unwrap();
                let empty = fill(&mut conn, &keys, n).await;
                measure(&mut conn, &url, &keys, empty).await;
            }
            "clean" => clean(&mut conn, &url, &keys).await,
            other => panic!("PHASE must be fill or clean, not {other:?}"),
        }
    });
}
