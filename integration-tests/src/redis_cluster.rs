//! A real 6-node Redis Cluster for a test, started by `deploy/cluster/redis-cluster.sh` on
//! its own ports and stopped by pid when dropped; plus what the failover and resharding
//! tests do to it (kill a master, read replication offsets, move slots).

use redis::aio::MultiplexedConnection;
use std::process::Command;
use std::time::{Duration, Instant};

const SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../deploy/cluster/redis-cluster.sh");

/// One node as `CLUSTER NODES` shows it.
#[derive(Debug, Clone)]
pub struct Node {
    /// Node id.
    pub id: String,
    /// Port on 127.0.0.1.
    pub port: u16,
    /// Master (else replica).
    pub master: bool,
    /// Marked failed.
    pub failed: bool,
    /// The master's id, for a replica.
    pub master_id: Option<String>,
    /// Slot ranges served (masters).
    pub slots: Vec<(u16, u16)>,
}

/// A running cluster. Dropping it stops every node (by the pids the script recorded).
pub struct RedisCluster {
    /// First port (nodes are `base..base+5`).
    pub base: u16,
    /// `redis+cluster://…` seeds for `SAVEPOINT_REDIS_URL`.
    pub url: String,
    dir: String,
    /// `cluster-node-timeout` of every node (ms).
    node_timeout_ms: u64,
}

/// A connection to one node (not cluster-aware: for admin commands).
pub async fn node(port: u16) -> redis::RedisResult<MultiplexedConnection> {
    redis::Client::open(format!("redis://127.0.0.1:{port}"))?
        .get_multiplexed_async_connection()
        .await
}

/// Runs a command on one node.
pub async fn on<T: redis::FromRedisValue>(port: u16, cmd: &redis::Cmd) -> redis::RedisResult<T> {
    cmd.query_async(&mut node(port).await?).await
}

fn info_field(info: &str, field: &str) -> Option<u64> {
    info.lines()
        .find_map(|l| l.strip_prefix(&format!("{field}:")))
        .and_then(|v| v.trim().parse().ok())
}

impl RedisCluster {
    /// Starts nodes `base..base+5` (3 masters, 3 replicas) and waits until the cluster is ok.
    pub fn start(base: u16) -> Self {
        Self::start_with(base, 1000)
    }

    /// [`Self::start`] with another `cluster-node-timeout` (how long a silent node takes to
    /// be marked failed; 15 s is Redis's default).
    pub fn start_with(base: u16, node_timeout_ms: u64) -> Self {
        let dir = format!("/tmp/savepoint-it-cluster-{base}-{}", std::process::id());
        let out = Command::new("bash")
            .arg(SCRIPT)
            .arg("start")
            .arg(base.to_string())
            .arg(&dir)
            .env("REDIS_CLUSTER_NODE_TIMEOUT_MS", node_timeout_ms.to_string())
            .output()
            .expect("run deploy/cluster/redis-cluster.sh");
        assert!(
            out.status.success(),
            "redis-cluster.sh start {base} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let url = text.lines().nth(1).expect("the script prints the URL").to_owned();
        Self {
            base,
            url,
            dir,
            node_timeout_ms,
        }
    }

    /// The pid of the node on `port`.
    pub fn pid(&self, port: u16) -> i32 {
        std::fs::read_to_string(format!("{}/{port}/pid", self.dir))
            .expect("pid file")
            .trim()
            .parse()
            .expect("pid")
    }

    /// Kills the node on `port` with SIGKILL.
    pub fn kill(&self, port: u16) {
        let pid = self.pid(port);
        let ok = Command::new("kill")
            .arg("-9")
            .arg(pid.to_string())
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok, "kill -9 {pid} (redis on {port})");
    }

    /// Starts the node on `port` again (after [`Self::kill`]), with its identity: it rejoins
    /// the cluster, as a replica if its replica was promoted meanwhile.
    pub fn restart(&self, port: u16) {
        self.restart_node(port, "no");
    }

    fn restart_node(&self, port: u16, aof: &str) {
        let ok = Command::new("bash")
            .arg(SCRIPT)
            .arg("restart-node")
            .arg(&self.dir)
            .arg(port.to_string())
            .env("REDIS_CLUSTER_NODE_TIMEOUT_MS", self.node_timeout_ms.to_string())
            .env("REDIS_CLUSTER_AOF", aof)
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok, "restart redis node {port} (append-only file: {aof})");
    }

    /// Turns the append-only file on for the node on `port` (fsynced on every write) and
    /// waits until it is written, so a restart with [`Self::restart_with_aof`] loses nothing.
    pub async fn enable_aof(&self, port: u16) {
        for (k, v) in [("appendfsync", "always"), ("appendonly", "yes")] {
            let _: () = on(port, redis::cmd("CONFIG").arg("SET").arg(k).arg(v))
                .await
                .expect("CONFIG SET");
        }
        let t0 = Instant::now();
        loop {
            let info: String = on(port, redis::cmd("INFO").arg("persistence")).await.expect("INFO");
            let done = info_field(&info, "aof_enabled") == Some(1)
                && info_field(&info, "aof_rewrite_in_progress") == Some(0)
                && info_field(&info, "aof_rewrite_scheduled") == Some(0);
            if done {
                return;
            }
            assert!(
                t0.elapsed() < Duration::from_secs(20),
                "node {port}: the AOF was not written"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// [`Self::restart`] with the append-only file the node wrote ([`Self::enable_aof`]).
    pub fn restart_with_aof(&self, port: u16) {
        self.restart_node(port, "yes");
    }

    /// Waits until the node on `port` is a replica in sync with its master.
    pub async fn wait_replica_synced(&self, port: u16, within: Duration) -> Duration {
        let t0 = Instant::now();
        loop {
            let info: String = on(port, redis::cmd("INFO").arg("replication"))
                .await
                .unwrap_or_default();
            if info.contains("role:slave") && info.contains("master_link_status:up") {
                return t0.elapsed();
            }
            assert!(
                t0.elapsed() < within,
                "node {port} did not rejoin as a replica within {within:?}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The cluster as a live node on `port` sees it.
    pub async fn nodes(&self, port: u16) -> Vec<Node> {
        let text: String = on(port, redis::cmd("CLUSTER").arg("NODES"))
            .await
            .expect("CLUSTER NODES");
        text.lines()
            .filter_map(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                let flags = *f.get(2)?;
                let port = f.get(1)?.split(['@', ',']).next()?.rsplit_once(':')?.1.parse().ok()?;
                let slots = f
                    .iter()
                    .skip(8)
                    .filter(|s| !s.starts_with('['))
                    .filter_map(|s| {
                        let (a, b) = s.split_once('-').unwrap_or((s, s));
                        Some((a.parse().ok()?, b.parse().ok()?))
                    })
                    .collect();
                Some(Node {
                    id: f[0].to_owned(),
                    port,
                    master: flags.contains("master"),
                    failed: flags.contains("fail"),
                    master_id: (f.get(3) != Some(&"-")).then(|| f[3].to_owned()),
                    slots,
                })
            })
            .collect()
    }

    /// The replica of the master `master`, once the node on `port` knows it (a new
    /// cluster's nodes learn who replicates whom by gossip, within a few seconds).
    pub async fn replica_of(&self, port: u16, master: &Node) -> Node {
        let t0 = Instant::now();
        loop {
            let nodes = self.nodes(port).await;
            if let Some(r) = nodes
                .iter()
                .find(|n| n.master_id.as_deref() == Some(master.id.as_str()))
            {
                return r.clone();
            }
            assert!(
                t0.elapsed() < Duration::from_secs(20),
                "master :{} has no replica in the view of :{port}: {nodes:?}",
                master.port
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The live master serving `slot`.
    pub async fn master_of(&self, port: u16, slot: u16) -> Node {
        self.nodes(port)
            .await
            .into_iter()
            .find(|n| n.master && !n.failed && n.slots.iter().any(|(a, b)| (*a..=*b).contains(&slot)))
            .unwrap_or_else(|| panic!("no live master serves slot {slot}"))
    }

    /// `master_repl_offset` of a node.
    pub async fn repl_offset(&self, port: u16) -> u64 {
        let info: String = on(port, redis::cmd("INFO").arg("replication")).await.expect("INFO");
        info_field(&info, "master_repl_offset").unwrap_or(0)
    }

    /// After a failover: the replication offset up to which the promoted node had the old
    /// master's stream (`second_repl_offset - 1`).
    pub async fn promoted_at(&self, port: u16) -> u64 {
        let info: String = on(port, redis::cmd("INFO").arg("replication")).await.expect("INFO");
        info_field(&info, "second_repl_offset").unwrap_or(1).saturating_sub(1)
    }

    /// Waits until `port` is a master and every live node reports `cluster_state:ok`.
    pub async fn wait_promoted(&self, port: u16, within: Duration) -> Duration {
        let t0 = Instant::now();
        loop {
            let role: String = on(port, &redis::cmd("ROLE"))
                .await
                .map(|v: Vec<redis::Value>| match v.first() {
                    Some(redis::Value::BulkString(b)) => String::from_utf8_lossy(b).into_owned(),
                    _ => String::new(),
                })
                .unwrap_or_default();
            let info: String = on(port, redis::cmd("CLUSTER").arg("INFO")).await.unwrap_or_default();
            if role == "master" && info.contains("cluster_state:ok") {
                return t0.elapsed();
            }
            assert!(t0.elapsed() < within, "node {port} was not promoted within {within:?}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Moves `slot` from the master on `from` to the master on `to`, keys and all, the way
    /// `redis-cli --cluster reshard` does: IMPORTING/MIGRATING, MIGRATE in batches, then
    /// SETSLOT NODE on both and every other master. Clients meet ASK and TRYAGAIN meanwhile.
    /// Returns the keys moved.
    pub async fn move_slot(&self, slot: u16, from: &Node, to: &Node) -> usize {
        let set = |port: u16, args: Vec<String>| async move {
            let mut c = redis::cmd("CLUSTER");
            c.arg("SETSLOT").arg(slot).arg(args);
            on::<String>(port, &c).await.expect("CLUSTER SETSLOT")
        };
        set(to.port, vec!["IMPORTING".into(), from.id.clone()]).await;
        set(from.port, vec!["MIGRATING".into(), to.id.clone()]).await;
        let mut moved = 0;
        loop {
            let keys: Vec<String> = on(from.port, redis::cmd("CLUSTER").arg("GETKEYSINSLOT").arg(slot).arg(100))
                .await
                .expect("GETKEYSINSLOT");
            if keys.is_empty() {
                break;
            }
            moved += keys.len();
            let mut m = redis::cmd("MIGRATE");
            m.arg("127.0.0.1")
                .arg(to.port)
                .arg("")
                .arg(0)
                .arg(5000)
                .arg("KEYS")
                .arg(&keys);
            let _: String = on(from.port, &m).await.expect("MIGRATE");
        }
        set(to.port, vec!["NODE".into(), to.id.clone()]).await;
        set(from.port, vec!["NODE".into(), to.id.clone()]).await;
        for n in self.nodes(to.port).await.iter().filter(|n| n.master && !n.failed) {
            if n.port != from.port && n.port != to.port {
                set(n.port, vec!["NODE".into(), to.id.clone()]).await;
            }
        }
        moved
    }
}

impl Drop for RedisCluster {
    fn drop(&mut self) {
        let _ = Command::new("bash").arg(SCRIPT).arg("stop").arg(&self.dir).status();
    }
}
