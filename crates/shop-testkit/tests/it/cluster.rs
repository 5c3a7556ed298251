//! `TestRedisCluster`: a formed cluster that spreads keys, counts commands, and fails
//! over when a primary is killed.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use redis::AsyncCommands;
use shop_testkit::TestRedisCluster;

/// Thirty keys: enough that each of the three primaries' slot ranges gets some.
fn keys() -> Vec<String> {
    let mut keys: Vec<String> = (0..30).map(|i| format!("key:{i}")).collect();
    keys.sort();
    keys
}

/// Writes every key (value = the key reversed) through a cluster connection.
async fn write_keys(cluster: &TestRedisCluster) {
    let mut conn = cluster.conn().await;
    for key in keys() {
        let () = conn.set(&key, value(&key)).await.unwrap();
    }
}

fn value(key: &str) -> String {
    key.chars().rev().collect()
}

/// How many keys one node holds, asked directly (not through the cluster client).
async fn dbsize(cluster: &TestRedisCluster, node: usize) -> u64 {
    let client = redis::Client::open(cluster.nodes()[node].as_str()).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    redis::cmd("DBSIZE").query_async(&mut conn).await.unwrap()
}

#[tokio::test]
async fn keys_are_spread_over_three_primaries_and_commands_counted() {
    let began = Instant::now();
    let cluster = TestRedisCluster::start();
    eprintln!("TestRedisCluster::start took {:?}", began.elapsed());

    assert_eq!(cluster.nodes().len(), 6);
    assert!(cluster.nodes()[0].starts_with("redis://127.0.0.1:"));
    assert_eq!(cluster.seeds_arg(), cluster.addrs().join(","));
    let primaries = cluster.primaries();
    assert_eq!(primaries.len(), 3, "primaries: {primaries:?}");

    write_keys(&cluster).await;
    let mut conn = cluster.conn().await;
    for key in keys() {
        let got: Option<String> = conn.get(&key).await.unwrap();
        assert_eq!(got, Some(value(&key)), "{key}");
    }
    assert_eq!(cluster.all_keys().await, keys());
    let mut per_primary = BTreeMap::new();
    for &node in &primaries {
        per_primary.insert(node, dbsize(&cluster, node).await);
    }
    assert!(per_primary.values().all(|&n| n > 0), "{per_primary:?}");
    assert_eq!(per_primary.values().sum::<u64>(), 30, "{per_primary:?}");

    cluster.reset_stats().await;
    let counts = cluster.command_counts().await;
    assert_eq!(counts.len(), 6);
    assert_eq!(counts.iter().filter(|(_, primary, _)| *primary).count(), 3);
    let before: u64 = counts.iter().map(|(_, _, calls)| calls).sum();
    assert!(before < 30, "counts just after a reset: {counts:?}");

    for key in keys() {
        let _: Option<String> = conn.get(&key).await.unwrap();
    }
    let counts = cluster.command_counts().await;
    let on_primaries: Vec<u64> = counts
        .iter()
        .filter(|(_, primary, _)| *primary)
        .map(|(_, _, calls)| *calls)
        .collect();
    assert!(on_primaries.iter().all(|&n| n > 0), "{counts:?}");
    assert!(on_primaries.iter().sum::<u64>() >= 30, "{counts:?}");
}

#[tokio::test]
async fn a_replica_takes_over_a_killed_primary_with_its_keys() {
    let mut cluster = TestRedisCluster::start();
    write_keys(&cluster).await;
    // Every primary's replica has acknowledged the writes made on this connection.
    let mut conn = cluster.conn().await;
    let acked: i64 = redis::cmd("WAIT")
        .arg(1)
        .arg(1_000)
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(acked, 1);
    drop(conn);

    let victim = cluster.primaries()[0];
    assert!(dbsize(&cluster, victim).await > 0, "the victim holds keys");
    cluster.kill(victim);
    let took = cluster.wait_until_ok(Duration::from_secs(10)).await;
    eprintln!("failover took {took:?}");
    // The others notice a dead node only after the node timeout (1 s).
    assert!(took >= Duration::from_millis(500), "{took:?}: did not wait");

    let primaries = cluster.primaries();
    assert_eq!(primaries.len(), 3, "primaries: {primaries:?}");
    assert!(!primaries.contains(&victim));
    let mut conn = cluster.conn().await;
    for key in keys() {
        let got: Option<String> = conn.get(&key).await.unwrap();
        assert_eq!(got, Some(value(&key)), "{key}");
    }
    assert_eq!(cluster.all_keys().await, keys());
}
