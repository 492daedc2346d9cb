//! A real 3-node RabbitMQ cluster for a test, started by `deploy/cluster/rabbitmq-cluster.sh`
//! beside the machine's own node (own node names, ports, cookie and data) and stopped by pid
//! when dropped; plus what the failover test does to its nodes.

use std::process::Command;

const SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../deploy/cluster/rabbitmq-cluster.sh");

/// A running cluster of nodes 1..=3. Dropping it stops them.
pub struct RabbitCluster {
    /// The three nodes' AMQP URLs, comma-separated (`SAVEPOINT_AMQP_URL`).
    pub url: String,
    dir: String,
}

fn script(args: &[&str]) -> std::process::Output {
    Command::new("bash")
        .arg(SCRIPT)
        .args(args)
        .output()
        .expect("run deploy/cluster/rabbitmq-cluster.sh")
}

impl RabbitCluster {
    /// Starts the three nodes on AMQP ports `base..base+2` and joins them.
    pub fn start(base: u16) -> Self {
        let dir = format!("/tmp/savepoint-it-rmq-{base}-{}", std::process::id());
        let out = script(&["start", &base.to_string(), &dir]);
        assert!(
            out.status.success(),
            "rabbitmq-cluster.sh start failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let url = text.lines().nth(1).expect("the script prints the URLs").to_owned();
        Self { url, dir }
    }

    /// `rabbitmqctl` on node `n` (1..=3); returns its standard output.
    pub fn ctl(&self, n: u8, args: &[&str]) -> String {
        let mut all = vec!["ctl", &self.dir];
        let n = n.to_string();
        all.push(&n);
        all.extend_from_slice(args);
        let out = script(&all);
        assert!(
            out.status.success(),
            "rabbitmqctl {args:?} on node {n}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// SIGKILLs node `n`.
    pub fn kill(&self, n: u8) {
        assert!(script(&["kill", &self.dir, &n.to_string()]).status.success());
    }

    /// Starts node `n` again after [`Self::kill`] (it rejoins the cluster) and waits for it.
    pub fn restart(&self, n: u8) {
        let out = script(&["restart", &self.dir, &n.to_string()]);
        assert!(
            out.status.success(),
            "restart node {n}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// The members of quorum queue `queue`, as node 1 reports them.
    pub fn quorum_members(&self, queue: &str) -> Vec<String> {
        let out = self.ctl(
            1,
            &["-q", "list_queues", "name", "type", "members", "--formatter", "json"],
        );
        let rows: Vec<serde_json::Value> = serde_json::from_str(&out).unwrap_or_default();
        rows.iter()
            .find(|r| r["name"] == queue)
            .map(|r| {
                assert_eq!(r["type"], "quorum", "{r}");
                r["members"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|m| m.as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default()
    }
}

impl Drop for RabbitCluster {
    fn drop(&mut self) {
        let _ = script(&["stop", &self.dir]);
    }
}
