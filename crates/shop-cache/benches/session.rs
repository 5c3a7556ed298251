#![allow(missing_docs)] // criterion_group! generates undocumented items.
//! Session touch throughput against a private redis-server: the shop's Lua script,
//! the same five commands as one pipeline, and the book's one command per round
//! trip, in the same run so their ratio holds on a noisy machine; then the script on
//! a private 6-node Redis Cluster with the cluster layout. Then a cart set,
//! the shop's against the book's.
//!
//! Run: `cargo bench -p shop-cache --bench session`. Each iteration is one touch
//! (an item view by a logged-in session); criterion reports touches per second.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use shop_cache::RedisConn;
use shop_cache::book;
use shop_cache::domain::{ItemId, UserId};
use shop_cache::keys::Keys;
use shop_cache::session::{SessionToken, Sessions, Touch, ViewFlusher};
use shop_testkit::{TestRedis, TestRedisCluster};

/// Concurrent callers, as many web-server tasks sharing one connection.
const CALLERS: u64 = 50;
/// Distinct sessions touched (each keeps its 25-item history).
const SESSIONS: usize = 10_000;
/// Items in the catalogue.
const ITEMS: u64 = 100_000;

#[derive(Clone, Copy)]
enum Way {
    Lua,
    Pipeline,
    BookSequential,
}

struct Fixture {
    conn: RedisConn,
    keys: Keys,
    sessions: Sessions,
    tokens: Arc<Vec<SessionToken>>,
    counter: Arc<AtomicU64>,
}

impl Fixture {
    fn new(conn: RedisConn, keys: Keys) -> Arc<Self> {
        Arc::new(Self {
            sessions: Sessions::new(conn.clone(), keys.clone()),
            conn,
            keys,
            tokens: Arc::new((0..SESSIONS).map(|_| SessionToken::generate()).collect()),
            counter: Arc::new(AtomicU64::new(0)),
        })
    }

    async fn touch(&self, way: Way, n: u64) {
        // A cheap deterministic spread over sessions and items (no RNG dependency).
        let mix = n.wrapping_mul(0x9E37_79B9_7F4A_7C15);
        let token = &self.tokens[(mix % SESSIONS as u64) as usize];
        let user = UserId::new(mix % SESSIONS as u64 + 1).unwrap();
        let item = ItemId::new((mix >> 20) % ITEMS + 1).unwrap();
        let mut conn = self.conn.clone();
        let result = match way {
            Way::Lua => self
                .sessions
                .touch(token, Touch::request().as_user(user).view(item))
                .await
                .map(|_| ()),
            Way::Pipeline => {
                book::update_token_pipelined(&mut conn, &self.keys, token, user, Some(item)).await
            }
            Way::BookSequential => {
                book::update_token(&mut conn, &self.keys, token, user, Some(item)).await
            }
        };
        result.expect("touch");
    }
}

async fn run_concurrently(fixture: &Arc<Fixture>, way: Way, iters: u64) -> Duration {
    let per_caller = iters.div_ceil(CALLERS);
    let start = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..CALLERS {
        let f = fixture.clone();
        tasks.spawn(async move {
            for _ in 0..per_caller {
                let n = f.counter.fetch_add(1, Ordering::Relaxed);
                f.touch(way, n).await;
            }
        });
    }
    while let Some(r) = tasks.join_next().await {
        r.unwrap();
    }
    start
        .elapsed()
        .mul_f64(iters as f64 / (per_caller * CALLERS) as f64)
}

fn touch(c: &mut Criterion) {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let server = TestRedis::start();
    let fixture = rt.block_on(async {
        let conn = shop_cache::connect(&server.url()).await.unwrap();
        Fixture::new(conn, Keys::default())
    });

    let mut group = c.benchmark_group("touch_50_callers");
    group.throughput(Throughput::Elements(1));
    group.sample_size(20);
    group.measurement_time(Duration::from_secs(5));
    for (name, way) in [
        ("lua_script", Way::Lua),
        ("pipeline", Way::Pipeline),
        ("book_sequential", Way::BookSequential),
    ] {
        group.bench_function(name, |b| {
            b.to_async(&rt)
                .iter_custom(|iters| run_concurrently(&fixture, way, iters));
        });
    }
    // The same script on a 6-node cluster (3 primaries, 3 replicas, all on this
    // machine) with the cluster layout: sessions spread over 64 shards, the view
    // counts batched and flushed every 100 ms by the flusher running alongside.
    let cluster = TestRedisCluster::start();
    let stop = tokio_util::sync::CancellationToken::new();
    let on_cluster = rt.block_on(async {
        let conn = shop_cache::connect_cluster(&cluster.addrs()).await.unwrap();
        Fixture::new(conn, Keys::cluster(""))
    });
    rt.spawn(shop_cache::daemon::run(
        ViewFlusher::new(on_cluster.sessions.clone()),
        stop.clone(),
    ));
    group.bench_function("lua_script_cluster", |b| {
        b.to_async(&rt)
            .iter_custom(|iters| run_concurrently(&on_cluster, Way::Lua, iters));
    });
    stop.cancel();
    group.finish();

    // Cart set: the shop's validated `Carts::set` against the book's bare HSET.
    let carts = rt.block_on(async {
        let conn = shop_cache::connect(&server.url()).await.unwrap();
        shop_cache::cart::Carts::new(conn, Keys::default(), 99)
    });
    let mut group = c.benchmark_group("cart_set_one_caller");
    group.throughput(Throughput::Elements(1));
    group.measurement_time(Duration::from_secs(3));
    let token = SessionToken::generate();
    let item = ItemId::new(42).unwrap();
    group.bench_function("shop_carts_set", |b| {
        b.to_async(&rt).iter(|| carts.set(&token, item, 3))
    });
    group.bench_function("book_hset", |b| {
        b.to_async(&rt).iter(|| async {
            let mut conn = fixture.conn.clone();
            redis::cmd("HSET")
                .arg(fixture.keys.cart(&token))
                .arg(item)
                .arg(3)
                .exec_async(&mut conn)
                .await
                .unwrap()
        })
    });
    group.finish();
    drop(server);
}

criterion_group!(benches, touch);
criterion_main!(benches);
