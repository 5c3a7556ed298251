//! Which nodes of a [`TestRedisCluster`] are primaries now and which replicates
//! which, each by its own account (`INFO replication`): a failover changes them.

use super::TestRedisCluster;
use super::info::is_primary;

impl TestRedisCluster {
    /// The live nodes that are primaries now, each by its own account (`INFO
    /// replication`), so that a test can pick a primary to kill or see which replica
    /// took over.
    pub fn primaries(&self) -> Vec<usize> {
        self.live()
            .filter(|&node| {
                let info = self
                    .ask_blocking(node, redis::cmd("INFO").arg("replication"))
                    .unwrap_or_else(|e| panic!("INFO replication on node {node}: {e}"));
                is_primary(&info)
            })
            .collect()
    }

    /// The live node that replicates `primary` (by its own `INFO replication`), so
    /// that a test can take a primary's slots away for good (its replica
    /// stopped too: no failover). Panics if none does. A paused node is asked
    /// too (and does not answer): call it before pausing any.
    pub async fn replica_of(&self, primary: usize) -> usize {
        let port = self.nodes[primary].port;
        for node in self.live().collect::<Vec<_>>() {
            let info: String = self.ask(node, redis::cmd("INFO").arg("replication")).await;
            if !is_primary(&info) && info.contains(&format!("master_port:{port}\r\n")) {
                return node;
            }
        }
        panic!("no live node replicates node {primary}");
    }
}
