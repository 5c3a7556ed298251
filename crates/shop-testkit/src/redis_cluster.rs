//! A private six-node Redis Cluster per test: three primaries, each with one replica.
//!
//! The shop can run on a Redis Cluster, where keys are spread over primaries by hash
//! slot and a replica takes over when its primary dies. Code that must work there
//! (cross-slot rules, `MOVED` redirections, failover, load spread over primaries) is
//! tested against [`TestRedisCluster`]: real `redis-server` processes on free loopback
//! ports in one temporary directory, persistence off, killed and removed on drop, their
//! logs printed if the test panics. Like [`crate::TestRedis`], never shared by tests.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use redis::{
    AsyncConnectionConfig, ConnectionAddr, ConnectionInfo, FromRedisValue, IntoConnectionInfo,
    RedisConnectionInfo,
};
use tempfile::TempDir;

use crate::redis_server::cannot_run;
use info::{info_field, is_primary, offset, total_calls};

mod info;
mod roles;
use shop_redis_server::server_bin;

/// Three primaries and one replica for each.
const NODES: usize = 6;

/// `cluster-node-timeout`, in milliseconds. A node unreachable this long is suspected
/// failing, so a killed primary's replica takes over in about two seconds: short enough
/// for failover drills in tests, long enough that a busy test machine does not cause
/// spurious failovers.
const NODE_TIMEOUT_MS: u64 = 1_000;

/// How many times [`TestRedisCluster::start`] picks new ports when a node could not
/// bind its ports (another process took one between our probe and the node's bind).
const START_ATTEMPTS: usize = 5;

/// How long a node may take to answer its first command.
const NODE_START_TIMEOUT: Duration = Duration::from_secs(10);

/// How long the cluster may take to be formed: every node `cluster_state:ok`, every
/// replica in sync. Redis keeps a new primary out of `ok` for its first two seconds.
const FORM_TIMEOUT: Duration = Duration::from_secs(30);

/// Between two looks at the cluster's state while waiting for it.
const POLL: Duration = Duration::from_millis(20);

/// Connect and response timeouts of the fixture's own connections to single nodes.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
const RESPONSE_TIMEOUT: Duration = Duration::from_secs(5);

/// A Redis Cluster of six `redis-server` processes (three primaries, three replicas)
/// owned by one test.
///
/// Nodes are numbered `0..6` in the order of [`TestRedisCluster::nodes`]; a number
/// keeps naming the same process after a failover changes its role. Each node has its
/// own directory (`node<N>/` holding `nodes.conf` and `redis.log`) under one temporary
/// directory. Dropping the cluster kills every node and removes the directory.
pub struct TestRedisCluster {
    nodes: Vec<Node>,
    dir: TempDir,
}

struct Node {
    port: u16,
    dir: PathBuf,
    /// `None` once killed.
    child: Option<Child>,
}

impl Node {
    fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    fn url(&self) -> String {
        format!("redis://{}", self.addr())
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("redis.log")).unwrap_or_default()
    }

    /// Where the fixture's own connections go. They skip `CLIENT SETINFO`, so that
    /// looking at a node does not add to the command counts being measured.
    fn connection_info(&self) -> ConnectionInfo {
        ConnectionAddr::Tcp("127.0.0.1".to_owned(), self.port)
            .into_connection_info()
            .expect("a TCP address is a valid connection info")
            .set_redis_settings(RedisConnectionInfo::default().set_skip_set_lib_name())
    }
}

impl TestRedisCluster {
    /// Starts six nodes, makes them a cluster with `redis-cli --cluster create`, and
    /// waits until every node says `cluster_state:ok` and every replica is in sync, so
    /// a test can write at once and a failover finds an up-to-date replica. Takes about
    /// two seconds (Redis holds a new primary out of `ok` for two seconds). Panics with
    /// every node's log if the cluster cannot be formed: a test cannot go on.
    pub fn start() -> Self {
        let mut attempt = 1;
        let cluster = loop {
            match Self::spawn_nodes() {
                Ok(cluster) => break cluster,
                Err(_) if attempt < START_ATTEMPTS => attempt += 1,
                Err(why) => {
                    panic!("cannot start {NODES} redis-server nodes ({attempt} attempts): {why}")
                }
            }
        };
        cluster.create().wait_until_formed()
    }

    /// Every node's URL, as [`redis::cluster::ClusterClient::new`] takes them, killed
    /// nodes included (indices stay stable).
    pub fn nodes(&self) -> Vec<String> {
        self.nodes.iter().map(Node::url).collect()
    }

    /// Every node's `127.0.0.1:<port>`, killed nodes included.
    pub fn addrs(&self) -> Vec<String> {
        self.nodes.iter().map(Node::addr).collect()
    }

    /// The seed nodes as one `host:port,host:port,...` argument, for the shop's
    /// `--redis-cluster` flag (or `SHOP_REDIS_CLUSTER`) in end-to-end tests.
    pub fn seeds_arg(&self) -> String {
        self.addrs().join(",")
    }

    /// A cluster client seeded with the live nodes, so that a client made after
    /// [`TestRedisCluster::kill`] does not start by trying a dead node.
    pub fn client(&self) -> redis::cluster::ClusterClient {
        let live: Vec<String> = self.live().map(|i| self.nodes[i].url()).collect();
        redis::cluster::ClusterClient::new(live).expect("valid cluster node URLs")
    }

    /// A cluster connection for a test's own reads and writes (checking what the code
    /// under test stored), separate from the connection the code under test uses.
    pub async fn conn(&self) -> redis::cluster_async::ClusterConnection {
        self.client()
            .get_async_connection()
            .await
            .expect("connect to the test Redis Cluster")
    }

    /// Every key in the cluster, sorted: `KEYS *` on each live primary. Replicas are
    /// skipped, so a replicated key appears once.
    pub async fn all_keys(&self) -> Vec<String> {
        let mut keys = Vec::new();
        for node in self.live() {
            let info: String = self.ask(node, redis::cmd("INFO").arg("replication")).await;
            if is_primary(&info) {
                let some: Vec<String> = self.ask(node, redis::cmd("KEYS").arg("*")).await;
                keys.extend(some);
            }
        }
        keys.sort();
        keys
    }

    /// Kills one node with SIGKILL, as a crash would: no goodbye to the other nodes,
    /// which notice it only through the cluster bus's timeout. Its log stays readable.
    pub fn kill(&mut self, node: usize) {
        if let Some(mut child) = self.nodes[node].child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Stops one node with SIGSTOP (a stall: its connections stay open, nothing
    /// answers; past the cluster's node time-out its replica takes over).
    pub fn pause(&self, node: usize) {
        crate::redis_server::signal(self.nodes[node].child.as_ref(), "-STOP");
    }

    /// Lets a [`TestRedisCluster::pause`]d node go on (SIGCONT).
    pub fn resume(&self, node: usize) {
        crate::redis_server::signal(self.nodes[node].child.as_ref(), "-CONT");
    }

    /// Waits until the cluster serves every slot again after [`TestRedisCluster::kill`]:
    /// every live node says `cluster_state:ok` and, in its `CLUSTER NODES`, every slot
    /// belongs to a live node not flagged as failing. (Just after a kill the nodes still
    /// say `ok`, not knowing yet; the second condition waits for the failover.)
    /// Returns how long it waited, to time a failover. Panics after `timeout`.
    pub async fn wait_until_ok(&self, timeout: Duration) -> Duration {
        let began = Instant::now();
        loop {
            let why = match self.serves_every_slot().await {
                Ok(()) => return began.elapsed(),
                Err(why) => why,
            };
            if began.elapsed() > timeout {
                panic!("the Redis Cluster is not ok after {timeout:?}: {why}");
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// Waits until every live replica has applied all that its primary had written
    /// when the call began (the replica's `slave_repl_offset` reaches the primary's
    /// `master_repl_offset`): replication is asynchronous, and a failover drill
    /// about the writes before it must not lose them to a replica's last
    /// milliseconds. Returns how long it waited. Panics after `timeout`.
    pub async fn wait_until_replicated(&self, timeout: Duration) -> Duration {
        let began = Instant::now();
        let mut written = Vec::new();
        for node in self.live() {
            let info: String = self.ask(node, redis::cmd("INFO").arg("replication")).await;
            if is_primary(&info) {
                written.push((self.nodes[node].port, offset(&info, "master_repl_offset")));
            }
        }
        loop {
            let mut behind = Vec::new();
            for node in self.live() {
                let info: String = self.ask(node, redis::cmd("INFO").arg("replication")).await;
                let primary = info_field(&info, "master_port").and_then(|p| p.parse().ok());
                let wanted = written.iter().find(|(port, _)| Some(*port) == primary);
                let applied = offset(&info, "slave_repl_offset");
                if let Some((port, wanted)) = wanted.filter(|(_, w)| applied < *w) {
                    behind.push(format!("node {node} at {applied} of {port}'s {wanted}"));
                }
            }
            if behind.is_empty() {
                return began.elapsed();
            }
            if began.elapsed() > timeout {
                panic!("replicas still behind after {timeout:?}: {behind:?}");
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// For each live node: its address, whether it is a primary, and how many commands
    /// it has run since [`TestRedisCluster::reset_stats`] (the sum of `calls=` over
    /// `INFO commandstats`), to measure how evenly a workload spreads over primaries.
    ///
    /// Counts include Redis's own traffic: a replica runs every write its primary
    /// replicates, a primary runs its replica's `REPLCONF ACK` each second, and cluster
    /// clients send `CLUSTER SLOTS` and `CLIENT SETINFO`. The fixture's own queries are
    /// not counted.
    pub async fn command_counts(&self) -> Vec<(String, bool, u64)> {
        let mut counts = Vec::new();
        for node in self.live() {
            // One command for both sections: INFO counts itself only after it replies.
            let info: String = self
                .ask(
                    node,
                    redis::cmd("INFO").arg("replication").arg("commandstats"),
                )
                .await;
            counts.push((
                self.nodes[node].addr(),
                is_primary(&info),
                total_calls(&info),
            ));
        }
        counts
    }

    /// Zeroes every live node's statistics (`CONFIG RESETSTAT`), so that
    /// [`TestRedisCluster::command_counts`] counts only what follows (not the
    /// cluster's creation, nor an earlier phase of a benchmark).
    pub async fn reset_stats(&self) {
        for node in self.live() {
            let () = self.ask(node, redis::cmd("CONFIG").arg("RESETSTAT")).await;
        }
    }

    /// What every node has logged so far, each under a header naming it.
    pub fn log(&self) -> String {
        let mut all = String::new();
        for (i, node) in self.nodes.iter().enumerate() {
            let state = if node.child.is_some() { "" } else { ", killed" };
            all.push_str(&format!(
                "---- node {i} ({}{state}) {} ----\n{}\n",
                node.addr(),
                node.dir.join("redis.log").display(),
                node.log()
            ));
        }
        all
    }

    /// Reserves free ports, starts the six processes and waits until each answers.
    /// `Err` (and every process killed) if a node exited or another process answered on
    /// its port: one of its ports was taken meanwhile, and new ports may do.
    fn spawn_nodes() -> Result<Self, String> {
        let dir = tempfile::Builder::new()
            .prefix("shop-redis-cluster-")
            .tempdir()
            .expect("create a temporary directory for the Redis Cluster");
        let mut cluster = Self {
            nodes: Vec::with_capacity(NODES),
            dir,
        };
        let ports = free_ports(2 * NODES);
        let bin = server_bin();
        for (i, pair) in ports.chunks(2).enumerate() {
            let (port, bus_port) = (pair[0], pair[1]);
            let node_dir = cluster.dir.path().join(format!("node{i}"));
            std::fs::create_dir(&node_dir).expect("create a node directory");
            let child = spawn_node(&bin, port, bus_port, &node_dir);
            cluster.nodes.push(Node {
                port,
                dir: node_dir,
                child: Some(child),
            });
        }
        let deadline = Instant::now() + NODE_START_TIMEOUT;
        for i in 0..NODES {
            loop {
                let node = &mut cluster.nodes[i];
                let child = node.child.as_mut().expect("not killed yet");
                if let Ok(Some(status)) = child.try_wait() {
                    return Err(format!(
                        "node {i} ({}) exited at start ({status}); log:\n{}",
                        node.addr(),
                        node.log()
                    ));
                }
                let pid = child.id();
                match cluster.ask_blocking(i, redis::cmd("INFO").arg("server")) {
                    Ok(info) if info_field(&info, "process_id") == Some(&pid.to_string()) => {
                        break;
                    }
                    Ok(_) => {
                        return Err(format!(
                            "another redis-server answers on node {i}'s port {}",
                            cluster.nodes[i].port
                        ));
                    }
                    Err(_) if Instant::now() < deadline => {
                        std::thread::sleep(Duration::from_millis(10))
                    }
                    Err(e) => cluster.fail(&format!(
                        "node {i} did not answer within {NODE_START_TIMEOUT:?}: {e}"
                    )),
                }
            }
        }
        Ok(cluster)
    }

    /// `redis-cli --cluster create`: slots split evenly over the first three nodes, a
    /// replica for each among the others, then every node introduced to every other.
    fn create(self) -> Self {
        let cli = cli_bin();
        let output = Command::new(&cli)
            .args(["--cluster", "create"])
            .args(self.addrs())
            .args(["--cluster-replicas", "1", "--cluster-yes"])
            .stdin(Stdio::null())
            .output()
            .unwrap_or_else(|e| panic!("{}", cannot_run(&cli, &e)));
        if !output.status.success() {
            self.fail(&format!(
                "`{cli} --cluster create` failed ({}):\n{}{}",
                output.status,
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr)
            ));
        }
        self
    }

    fn wait_until_formed(self) -> Self {
        let deadline = Instant::now() + FORM_TIMEOUT;
        loop {
            match self.formed() {
                Ok(()) => return self,
                Err(_) if Instant::now() < deadline => std::thread::sleep(POLL),
                Err(why) => self.fail(&format!(
                    "the Redis Cluster was not formed within {FORM_TIMEOUT:?}: {why}"
                )),
            }
        }
    }

    /// `Ok` once every node says `cluster_state:ok`, there are three primaries, each
    /// with its replica online, and every node knows who replicates whom (a primary
    /// that still takes a replica for a primary would refuse it its failover vote).
    fn formed(&self) -> Result<(), String> {
        let mut primaries = 0;
        for i in 0..NODES {
            let cluster_info = self
                .ask_blocking(i, redis::cmd("CLUSTER").arg("INFO"))
                .map_err(|e| format!("node {i}: CLUSTER INFO: {e}"))?;
            if info_field(&cluster_info, "cluster_state") != Some("ok") {
                return Err(format!("node {i} is not ok:\n{cluster_info}"));
            }
            let nodes = self
                .ask_blocking(i, redis::cmd("CLUSTER").arg("NODES"))
                .map_err(|e| format!("node {i}: CLUSTER NODES: {e}"))?;
            let replicas = nodes
                .lines()
                .filter(|line| {
                    line.split_whitespace()
                        .nth(2)
                        .is_some_and(|f| f.contains("slave"))
                })
                .count();
            if replicas != NODES / 2 {
                return Err(format!(
                    "node {i} knows {replicas} replicas, not {}:\n{nodes}",
                    NODES / 2
                ));
            }
            let replication = self
                .ask_blocking(i, redis::cmd("INFO").arg("replication"))
                .map_err(|e| format!("node {i}: INFO replication: {e}"))?;
            if is_primary(&replication) {
                primaries += 1;
                let online = info_field(&replication, "slave0")
                    .is_some_and(|replica| replica.contains("state=online"));
                if info_field(&replication, "connected_slaves") != Some("1") || !online {
                    return Err(format!(
                        "primary {i} has no replica in sync:\n{replication}"
                    ));
                }
            }
        }
        if primaries != NODES / 2 {
            return Err(format!("{primaries} primaries, not {}", NODES / 2));
        }
        Ok(())
    }

    /// `Ok` once every live node says `cluster_state:ok` and gives every slot to a live
    /// node not flagged as failing.
    async fn serves_every_slot(&self) -> Result<(), String> {
        let live_ports: Vec<u16> = self.live().map(|i| self.nodes[i].port).collect();
        for node in self.live() {
            let info: String = self
                .try_ask(node, redis::cmd("CLUSTER").arg("INFO"))
                .await
                .map_err(|e| format!("node {node}: CLUSTER INFO: {e}"))?;
            if info_field(&info, "cluster_state") != Some("ok") {
                return Err(format!("node {node} is not ok:\n{info}"));
            }
            let nodes: String = self
                .try_ask(node, redis::cmd("CLUSTER").arg("NODES"))
                .await
                .map_err(|e| format!("node {node}: CLUSTER NODES: {e}"))?;
            // <id> <ip:port@cport[,hostname]> <flags> <primary> <ping> <pong> <epoch>
            // <link> <slot> <slot> ...
            for line in nodes.lines() {
                let fields: Vec<&str> = line.split_whitespace().collect();
                if fields.len() <= 8 {
                    continue; // owns no slot
                }
                let port = fields[1]
                    .split('@')
                    .next()
                    .and_then(|addr| addr.rsplit(':').next())
                    .and_then(|port| port.parse::<u16>().ok());
                let live = port.is_some_and(|port| live_ports.contains(&port));
                if !live || fields[2].contains("fail") {
                    return Err(format!(
                        "node {node} still gives slots to a dead node:\n{nodes}"
                    ));
                }
            }
        }
        Ok(())
    }

    fn live(&self) -> impl Iterator<Item = usize> + '_ {
        (0..self.nodes.len()).filter(|&i| self.nodes[i].child.is_some())
    }

    /// Runs one command on one node, from a blocking context (start, `primaries`).
    fn ask_blocking(&self, node: usize, cmd: &redis::Cmd) -> redis::RedisResult<String> {
        let client = redis::Client::open(self.nodes[node].connection_info())?;
        let mut conn = client.get_connection_with_timeout(CONNECT_TIMEOUT)?;
        conn.set_read_timeout(Some(RESPONSE_TIMEOUT))?;
        cmd.query(&mut conn)
    }

    async fn try_ask<T: FromRedisValue>(
        &self,
        node: usize,
        cmd: &redis::Cmd,
    ) -> redis::RedisResult<T> {
        let client = redis::Client::open(self.nodes[node].connection_info())?;
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(CONNECT_TIMEOUT))
            .set_response_timeout(Some(RESPONSE_TIMEOUT));
        let mut conn = client
            .get_multiplexed_async_connection_with_config(&config)
            .await?;
        cmd.query_async(&mut conn).await
    }

    /// Runs one command on a live node, which must answer.
    async fn ask<T: FromRedisValue>(&self, node: usize, cmd: &redis::Cmd) -> T {
        self.try_ask(node, cmd).await.unwrap_or_else(|e| {
            panic!(
                "node {node} ({}) failed a command: {e}",
                self.nodes[node].addr()
            )
        })
    }

    /// Stops everything and panics with the reason and every node's log (the panic's
    /// message rather than `Drop`'s, which would print them a second time).
    fn fail(self, why: &str) -> ! {
        let log = self.log();
        drop(self);
        panic!("{why}\n{log}");
    }
}

impl Drop for TestRedisCluster {
    fn drop(&mut self) {
        for node in 0..self.nodes.len() {
            self.kill(node);
        }
        if std::thread::panicking() {
            eprintln!(
                "---- Redis Cluster logs ({}) ----\n{}",
                self.dir.path().display(),
                self.log()
            );
        }
    }
}

/// `count` distinct TCP ports free on 127.0.0.1 now, found by binding port 0. All are
/// held until all are found, so none is handed out twice.
fn free_ports(count: usize) -> Vec<u16> {
    let listeners: Vec<TcpListener> = (0..count)
        .map(|_| TcpListener::bind("127.0.0.1:0").expect("bind a free port on 127.0.0.1"))
        .collect();
    listeners
        .iter()
        .map(|l| l.local_addr().expect("a bound address").port())
        .collect()
}

fn spawn_node(bin: &str, port: u16, bus_port: u16, dir: &Path) -> Child {
    Command::new(bin)
        .args(["--cluster-enabled", "yes", "--cluster-config-file"])
        .arg(dir.join("nodes.conf"))
        .args(["--cluster-node-timeout", &NODE_TIMEOUT_MS.to_string()])
        .args(["--port", &port.to_string()])
        .args(["--cluster-port", &bus_port.to_string()])
        .args(["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
        // A replica's first sync starts at once instead of after Redis's default five
        // seconds of waiting for more replicas to share the transfer.
        .args(["--repl-diskless-sync-delay", "0"])
        .arg("--dir")
        .arg(dir)
        .arg("--logfile")
        .arg(dir.join("redis.log"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap_or_else(|e| panic!("{}", cannot_run(bin, &e)))
}

/// The `redis-cli` beside the `redis-server` named by [`crate::redis_server::BIN_ENV`]
/// if there is one there, else the one on `PATH`.
fn cli_bin() -> String {
    let server = PathBuf::from(server_bin());
    let beside = server.with_file_name("redis-cli");
    let in_a_dir = server.parent().is_some_and(|d| !d.as_os_str().is_empty());
    if in_a_dir && beside.exists() {
        beside.display().to_string()
    } else {
        "redis-cli".to_owned()
    }
}
