//! Redis Cluster: naming one, connecting to it, and the slot rules the store keeps.
//!
//! A cluster is named by a URL whose scheme says so and whose authority lists seed nodes:
//! `redis+cluster://[user:password@]host:port[,host:port…]` (`rediss+cluster://` for TLS).
//! The client (redis-rs's cluster support) learns the slot map from any seed, follows `MOVED`
//! and `ASK` while slots move, and refreshes the map after a failover.
//!
//! Every script is handed keys of one hash slot (a run's keys share `{pNN}`, an effect record
//! has its own `{fxNN}`); [`one_slot`] checks that before each script is sent, on every
//! backend, so a script that would fail with `CROSSSLOT` on a cluster fails on the embedded
//! engine and a single Redis too.

use crate::RedisResultExt;
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{Route, RoutingInfo, SingleNodeRoutingInfo, Slot, SlotAddr};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use super::StoreError;

const SCHEMES: [(&str, &str); 2] = [("redis+cluster://", "redis://"), ("rediss+cluster://", "rediss://")];

/// The seed node URLs of a cluster URL, or `None` when `url` does not name a cluster.
pub fn seed_urls(url: &str) -> Option<Result<Vec<String>, StoreError>> {
    let (rest, node_scheme) = SCHEMES
        .iter()
        .find_map(|(scheme, node)| url.strip_prefix(scheme).map(|rest| (rest, *node)))?;
    let rest = rest.trim_end_matches('/');
    let (auth, hosts) = match rest.rfind('@') {
        Some(i) => (&rest[..=i], &rest[i + 1..]),
        None => ("", rest),
    };
    let seeds: Vec<String> = hosts
        .split(',')
        .map(str::trim)
        .filter(|h| !h.is_empty())
        .map(|h| format!("{node_scheme}{auth}{h}"))
        .collect();
    if seeds.is_empty() {
        return Some(Err(StoreError::Layout(format!(
            "the Redis Cluster URL names no seed node: expected redis+cluster://host:port[,host:port…], got {}",
            redact(url)
        ))));
    }
    Some(Ok(seeds))
}

/// The `host:port` of each seed URL, comma-separated (no scheme, no credentials).
pub(crate) fn hosts_of(seeds: &[String]) -> String {
    seeds
        .iter()
        .map(|u| {
            let rest = u.split_once("://").map_or(u.as_str(), |(_, r)| r);
            rest.rsplit_once('@').map_or(rest, |(_, h)| h).to_owned()
        })
        .collect::<Vec<_>>()
        .join(",")
}

/// A comma-separated list of URLs (AMQP cluster nodes) with every password replaced by `***`.
pub fn redact_list(urls: &str) -> String {
    urls.split(',').map(|u| redact(u.trim())).collect::<Vec<_>>().join(",")
}

/// `url` with any password replaced by `***` (for errors and logs).
pub fn redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(s), Some(at)) if at > s => {
            let userinfo = &url[s + 3..at];
            let user = userinfo.split(':').next().unwrap_or_default();
            format!("{}{user}:***{}", &url[..s + 3], &url[at..])
        }
        _ => url.to_owned(),
    }
}

/// Connects to the cluster named by `seeds`. The client retries a command that meets a moved
/// slot, a failover in progress or a dropped node, with back-off, within the response timeout.
async fn connect(
    seeds: &[String],
    command_timeout: Duration,
    tls: &savepoint_core::tls::TlsMaterial,
) -> Result<ClusterConnection, StoreError> {
    let mut builder = ClusterClient::builder(seeds.to_vec());
    if seeds.iter().any(|s| s.starts_with("rediss://")) {
        crate::tls::install_crypto_provider();
        builder = builder.certs(crate::tls::redis_certs(tls));
    }
    let client = builder
        .retries(6)
        .min_retry_wait(50)
        .max_retry_wait(2000)
        .connection_timeout(command_timeout.max(Duration::from_millis(500)))
        .response_timeout(command_timeout)
        .build()
        .store()?;
    client.get_async_connection().await.store()
}

/// The store's cluster connection, rebuilt from the seeds when a node is lost.
///
/// The cluster client follows `MOVED` and `ASK`, but a master that died does not answer
/// `MOVED`: the client would keep reconnecting to its address, long after its replica was
/// promoted. So a command that fails because its node is gone (refused, dropped,
/// `CLUSTERDOWN`) starts one rebuild in the background: a new client learns the slot map
/// from whichever seed answers, and replaces the old one. The failed command's error is
/// transient; the caller's retry runs on the new map. Rebuilds are at most one at a time and
/// one per [`REBUILD_EVERY`].
///
/// A master that restarts on its own address before any failover (a fast pod restart, a
/// master whose replica had not synced) shows no such error: the client's connection to it
/// only times out, for as long as the process lives. One timeout is a slow node, not a lost
/// one, but commands that keep timing out for twice the command timeout (a streak: timeouts
/// no more than that apart) also start a rebuild, which connects to every node anew. A node
/// that is merely slow costs at most one rebuild per streak of that length.
#[derive(Clone)]
pub(crate) struct ClusterConn {
    inner: Arc<Inner>,
}

struct Inner {
    seeds: Vec<String>,
    command_timeout: Duration,
    tls: savepoint_core::tls::TlsMaterial,
    conn: RwLock<ClusterConnection>,
    rebuilding: AtomicBool,
    rebuilds: AtomicU64,
    timeouts: Streak,
    born: tokio::time::Instant,
}

/// Least time between two rebuilds of the cluster connection.
pub const REBUILD_EVERY: Duration = Duration::from_millis(250);

impl ClusterConn {
    /// Connects through the seeds.
    pub(crate) async fn connect(
        seeds: Vec<String>,
        command_timeout: Duration,
        tls: &savepoint_core::tls::TlsMaterial,
    ) -> Result<Self, StoreError> {
        let conn = connect(&seeds, command_timeout, tls).await?;
        Ok(Self {
            inner: Arc::new(Inner {
                seeds,
                command_timeout,
                tls: tls.clone(),
                conn: RwLock::new(conn),
                rebuilding: AtomicBool::new(false),
                rebuilds: AtomicU64::new(0),
                timeouts: Streak::default(),
                born: tokio::time::Instant::now(),
            }),
        })
    }

    /// The current connection (a cheap clone of a multiplexed handle).
    pub(crate) fn get(&self) -> ClusterConnection {
        self.inner.conn.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Passes a result through, starting a rebuild when it says a node is gone.
    pub(crate) fn seen<T>(&self, r: redis::RedisResult<T>) -> redis::RedisResult<T> {
        if let Err(e) = &r {
            if node_lost(e) {
                self.rebuild("node lost");
            } else if e.is_timeout() && self.timeouts_persist() {
                self.rebuild("commands kept timing out");
            }
        }
        r
    }

    /// Records a timeout; true when timeouts have kept coming for twice the command timeout.
    fn timeouts_persist(&self) -> bool {
        let inner = &self.inner;
        let span = (2 * inner.command_timeout.as_millis() as u64).max(1);
        inner.timeouts.hit(inner.born.elapsed().as_millis() as u64 + 1, span)
    }

    fn rebuild(&self, why: &'static str) {
        if self.inner.rebuilding.swap(true, Ordering::AcqRel) {
            return;
        }
        let inner = Arc::clone(&self.inner);
        tokio::spawn(async move {
            match connect(&inner.seeds, inner.command_timeout, &inner.tls).await {
                Ok(conn) => {
                    *inner.conn.write().unwrap_or_else(|p| p.into_inner()) = conn;
                    let n = inner.rebuilds.fetch_add(1, Ordering::Relaxed) + 1;
                    tracing::info!(
                        rebuilds = n,
                        why,
                        "redis cluster: connection rebuilt, slot map reloaded from the seeds"
                    );
                }
                Err(e) => tracing::warn!(error = %e, "redis cluster: reconnecting through the seeds failed"),
            }
            tokio::time::sleep(REBUILD_EVERY).await;
            inner.rebuilding.store(false, Ordering::Release);
        });
    }
}

/// A streak of timeouts: timeouts no more than `span` apart. Times are ms (> 0) on one clock.
#[derive(Default)]
struct Streak {
    /// The start of the current streak and the latest timeout (0: none yet).
    since: AtomicU64,
    last: AtomicU64,
}

impl Streak {
    /// Records a timeout at `now`; true when the streak has lasted `span`, which also starts
    /// a new streak (so a node that is only slow is rebuilt at most once per `span`).
    fn hit(&self, now: u64, span: u64) -> bool {
        let last = self.last.swap(now, Ordering::AcqRel);
        if last == 0 || now.saturating_sub(last) > span {
            self.since.store(now, Ordering::Release);
            return false;
        }
        if now.saturating_sub(self.since.load(Ordering::Acquire)) < span {
            return false;
        }
        self.since.store(now, Ordering::Release);
        true
    }
}

/// True when an error means the node that was asked is gone (or the cluster is between
/// maps), not that the command was wrong.
fn node_lost(e: &redis::RedisError) -> bool {
    use redis::{ErrorKind, ServerErrorKind};
    // Not a timeout: under load that is a slow node, and a rebuild would only add churn.
    (e.is_io_error() && !e.is_timeout())
        || e.is_connection_refusal()
        || e.is_connection_dropped()
        || matches!(
            e.kind(),
            ErrorKind::ClusterConnectionNotFound
                | ErrorKind::Server(ServerErrorKind::ClusterDown | ServerErrorKind::MasterDown)
        )
}

/// The route of a key's slot, on its master.
pub(crate) fn master_of(key: &[u8]) -> RoutingInfo {
    RoutingInfo::SingleNode(SingleNodeRoutingInfo::SpecificNode(Route::with_key(
        key,
        SlotAddr::Master,
    )))
}

/// The route of one command of a pipeline: the slot of its first key (every command the store
/// pipelines names one key right after its verb).
pub(crate) fn route_of(cmd: &redis::Cmd) -> Route {
    let key = match cmd.args_iter().nth(1) {
        Some(redis::Arg::Simple(k)) => k,
        _ => &[],
    };
    Route::with_key(key, SlotAddr::Master)
}

/// Checks that every key handed to the script `script` lies in one hash slot.
pub(crate) fn one_slot(script: &str, keys: &[Vec<u8>]) -> Result<(), StoreError> {
    let Some(first) = keys.first() else { return Ok(()) };
    let slot = Slot::for_key(first);
    match keys.iter().find(|k| Slot::for_key(k) != slot) {
        None => Ok(()),
        Some(other) => Err(StoreError::CrossSlot {
            script: script.to_owned(),
            first: String::from_utf8_lossy(first).into_owned(),
            other: String::from_utf8_lossy(other).into_owned(),
        }),
    }
}

/// The masters of the cluster (`host`, `port`) from `CLUSTER NODES`, failed ones left out.
pub(crate) fn masters(cluster_nodes: &str) -> Vec<(String, u16)> {
    cluster_nodes
        .lines()
        .filter_map(|line| {
            let mut f = line.split_whitespace();
            let (_id, addr, flags) = (f.next()?, f.next()?, f.next()?);
            let flags: Vec<&str> = flags.split(',').collect();
            if !flags.contains(&"master") || flags.iter().any(|f| f.starts_with("fail") || *f == "noaddr") {
                return None;
            }
            let hostport = addr.split(['@', ',']).next()?;
            let (host, port) = hostport.rsplit_once(':')?;
            Some((host.to_owned(), port.parse().ok()?))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timeouts_that_keep_coming_for_the_span_start_one_rebuild_per_streak() {
        let s = Streak::default();
        // Timeouts every 300 ms for 2 s (span 2 s): one rebuild, when the streak is 2 s old.
        let fired: Vec<u64> = (0..=8u64).map(|i| 1 + i * 300).filter(|t| s.hit(*t, 2000)).collect();
        assert_eq!(fired, vec![2101]);
        // The streak goes on: the next rebuild is another span later, not on every timeout.
        assert!(!s.hit(4000, 2000));
        assert!(s.hit(4200, 2000));
        // Timeouts further apart than the span are a slow node now and then: never a rebuild.
        let s = Streak::default();
        assert!((0..10u64).all(|i| !s.hit(1 + i * 2500, 2000)));
    }

    #[test]
    fn cluster_urls_name_their_seeds_and_keep_credentials() {
        assert!(seed_urls("redis://127.0.0.1:6379").is_none());
        assert_eq!(
            seed_urls("redis+cluster://127.0.0.1:7000,127.0.0.1:7001/")
                .unwrap()
                .unwrap(),
            vec!["redis://127.0.0.1:7000", "redis://127.0.0.1:7001"]
        );
        assert_eq!(
            seed_urls("rediss+cluster://app:s3cr@t@r1:6380,r2:6380")
                .unwrap()
                .unwrap(),
            vec!["rediss://app:s3cr@t@r1:6380", "rediss://app:s3cr@t@r2:6380"]
        );
        let e = seed_urls("redis+cluster://").unwrap().unwrap_err().to_string();
        assert!(e.contains("names no seed node"), "{e}");
        assert_eq!(
            redact("redis+cluster://app:pw@h:1,h:2"),
            "redis+cluster://app:***@h:1,h:2"
        );
        assert_eq!(redact("redis://h:1"), "redis://h:1");
    }

    #[test]
    fn keys_of_one_run_pass_and_keys_of_two_slots_are_named() {
        let run = |p: &str| format!("sp:{{p{p}}}:run:t").into_bytes();
        assert!(one_slot("commit", &[run("07"), b"sp:{p07}:due".to_vec()]).is_ok());
        let e = one_slot("commit", &[run("07"), run("08")]).unwrap_err().to_string();
        assert!(e.contains("commit") && e.contains("{p08}"), "{e}");
    }

    #[test]
    fn masters_are_read_from_cluster_nodes() {
        let text = "\
a1 127.0.0.1:7000@17000 myself,master - 0 0 1 connected 0-5460
b2 127.0.0.1:7003@17003 slave a1 0 0 1 connected
c3 127.0.0.1:7001@17001,host-1 master - 0 0 2 connected 5461-10922
d4 127.0.0.1:7002@17002 master,fail - 0 0 3 disconnected
";
        assert_eq!(
            masters(text),
            vec![("127.0.0.1".to_owned(), 7000), ("127.0.0.1".to_owned(), 7001)]
        );
    }
}
