//! A pipeline over several primaries of a cluster with one primary stalled: the
//! stalled node's breaker opens, not the breaker of the node serving the
//! pipeline's first key. The sessions' count over every shard is such a
//! pipeline, and it is the health check's one look at every primary: charged
//! to its first key's node, it opened that node's breaker (failing the live
//! node's own commands) and never the stalled one's.

use std::time::{Duration, Instant};

use shop_cache::keys::Keys;
use shop_cache::session::Sessions;
use shop_testkit::TestRedisCluster;

/// The request path's budget in the shop.
const BUDGET: Duration = Duration::from_millis(100);

/// A direct connection to one node.
async fn node(cluster: &TestRedisCluster, node: usize) -> redis::aio::MultiplexedConnection {
    redis::Client::open(cluster.nodes()[node].as_str())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap()
}

/// The primary that holds `key` (written before).
async fn holder(cluster: &TestRedisCluster, primaries: &[usize], key: &str) -> usize {
    for &primary in primaries {
        // Another primary answers MOVED.
        let here: bool = redis::cmd("EXISTS")
            .arg(key)
            .query_async(&mut node(cluster, primary).await)
            .await
            .unwrap_or(false);
        if here {
            return primary;
        }
    }
    panic!("no primary holds {key}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_primary_is_charged_with_its_own_part_of_a_pipeline() {
    let cluster = TestRedisCluster::start();
    // The live primaries keep serving their slots while one is gone (else they
    // answer CLUSTERDOWN once the stalled one is marked failing).
    for n in 0..cluster.addrs().len() {
        let _: () = redis::cmd("CONFIG")
            .arg("SET")
            .arg("cluster-require-full-coverage")
            .arg("no")
            .query_async(&mut node(&cluster, n).await)
            .await
            .unwrap();
    }
    let conn = shop_cache::connect_cluster(&cluster.addrs())
        .await
        .unwrap()
        .with_budget(BUDGET);
    let keys = Keys::cluster("");
    let sessions = Sessions::new(conn.clone(), keys.clone());
    let mut raw = cluster.conn().await;
    let shards: Vec<_> = keys.shards().collect();
    for shard in &shards {
        let _: () = redis::cmd("ZADD")
            .arg(keys.recent_in(*shard))
            .arg(1)
            .arg("a-session")
            .query_async(&mut raw)
            .await
            .unwrap();
    }
    // The handle reads the slot map in the background on first use; a count
    // may miss the budget on a busy machine.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let counted = sessions.count().await;
        if let (3, Ok(count)) = (conn.nodes_failing().of, &counted) {
            assert_eq!(*count, shards.len() as u64);
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no whole count with the slot map known: {counted:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    let primaries = cluster.primaries();
    let first_key = keys.recent_in(shards[0]).to_owned();
    let first = holder(&cluster, &primaries, &first_key).await;
    let mut stalled = None;
    for shard in &shards {
        let at = holder(&cluster, &primaries, keys.recent_in(*shard)).await;
        if at != first {
            stalled = Some(at);
            break;
        }
    }
    let stalled = stalled.expect("the shards span more than one primary");
    let replica = cluster.replica_of(stalled).await;
    let (first_addr, stalled_addr) = (&cluster.addrs()[first], &cluster.addrs()[stalled]);

    // No failover: the replica stalls too.
    cluster.pause(replica);
    cluster.pause(stalled);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        assert!(
            sessions.count().await.is_err(),
            "a stalled primary's part cannot be answered"
        );
        let failing = conn.nodes_failing().failing;
        assert!(
            !failing.contains(first_addr),
            "the first key's node {first_addr} was charged with the stalled one's miss: {failing:?}"
        );
        if failing.contains(stalled_addr) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the stalled node {stalled_addr}'s breaker never opened"
        );
    }
    // The first key's node serves its own commands.
    let size: u64 = redis::cmd("ZCARD")
        .arg(&first_key)
        .query_async(&mut conn.clone())
        .await
        .expect("the node serving the first key serves");
    assert_eq!(size, 1);

    cluster.resume(stalled);
    cluster.resume(replica);
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        match sessions.count().await {
            Ok(count) => {
                assert_eq!(count, shards.len() as u64);
                break;
            }
            Err(error) => assert!(
                Instant::now() < deadline,
                "the count never came back after the stall: {error}"
            ),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(conn.nodes_failing().failing.is_empty());
}
