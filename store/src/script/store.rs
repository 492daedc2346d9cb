//! The store handle: its connection, settings and the script plumbing every operation shares.

use crate::RedisResultExt;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use std::sync::Arc;
use std::time::Duration;

use super::reply::Reply;
use super::scripts::{self, Scripts};
use super::StoreConfig;
use crate::cluster;
use crate::diagnose;
use crate::engine::{Conn, Engine, Invocation};
#[cfg(feature = "embedded")]
use crate::mem::{self, MemEngine};
use crate::model::Lease;
use crate::StoreError;
use savepoint_core::ids::ThreadId;
use savepoint_core::journal::Entry;
use savepoint_core::keys::Keys;

/// The checkpoint store. Cheap to clone. On Redis: one multiplexed, auto-reconnecting
/// connection; embedded: a shared handle on the in-process engine.
#[derive(Clone)]
pub struct ScriptStore {
    pub(super) engine: Engine,
    pub(super) keys: Keys,
    pub(super) cfg: StoreConfig,
    pub(super) scripts: Arc<Scripts>,
    /// The namespace's naming secret, once read (`naming.rs`).
    pub(super) naming: Arc<tokio::sync::OnceCell<[u8; 32]>>,
}

/// A duration in whole milliseconds (the scripts' unit).
pub(super) fn ms(d: Duration) -> u64 {
    d.as_millis() as u64
}

impl ScriptStore {
    /// Connects (the connection manager reconnects with exponential backoff on its own).
    /// `mem://NAME` opens the process-wide embedded instance `NAME` instead of a server;
    /// `redis+cluster://host:port,…` a Redis Cluster through its seed nodes.
    pub async fn connect(url: &str, keys: Keys, cfg: StoreConfig) -> Result<Self, StoreError> {
        if let Some(name) = savepoint_core::mem::instance_name(url) {
            #[cfg(feature = "embedded")]
            return Ok(Self::embedded(mem::engine(name), keys, cfg));
            #[cfg(not(feature = "embedded"))]
            return Err(StoreError::Unsupported(format!(
                "the store URL names the embedded engine ({name}), which this build leaves out \
                 (savepoint-store's feature `embedded`)"
            )));
        }
        let conn = match cluster::seed_urls(url) {
            Some(seeds) => {
                let seeds = seeds?;
                let hosts = cluster::hosts_of(&seeds);
                match cluster::ClusterConn::connect(seeds, cfg.command_timeout, &cfg.tls).await {
                    Ok(c) => Conn::Cluster(c),
                    Err(e) => {
                        return Err(match diagnose::cluster_url_at_single_redis(&hosts, &e) {
                            Some(d) => StoreError::Misconfigured(d),
                            None => e,
                        })
                    }
                }
            }
            None => Conn::Redis(Self::connect_single(url, &cfg).await?),
        };
        Ok(Self::on(conn, keys, cfg))
    }

    /// Connects to a single Redis (`redis://` or `rediss://`), then asks it `INFO cluster`: a
    /// first-day mistake in the URL (a Cluster node, a missing or refused password, a TLS
    /// port) is a [`StoreError::Misconfigured`] naming what to do, not a retry loop.
    async fn connect_single(url: &str, cfg: &StoreConfig) -> Result<ConnectionManager, StoreError> {
        let tls = url.starts_with("rediss://");
        let client = if tls {
            crate::tls::install_crypto_provider();
            redis::Client::build_with_tls(url, crate::tls::redis_certs(&cfg.tls)).store()?
        } else {
            redis::Client::open(url).store()?
        };
        let addr = client.get_connection_info().addr().to_string();
        let mcfg = ConnectionManagerConfig::new()
            .set_min_delay(Duration::from_millis(50))
            .set_max_delay(Duration::from_secs(2))
            .set_number_of_retries(6)
            .set_connection_timeout(Some(cfg.command_timeout.max(Duration::from_millis(500))))
            .set_response_timeout(Some(cfg.command_timeout));
        let mut conn = match ConnectionManager::new_with_config(client, mcfg).await {
            Ok(c) => c,
            Err(e) => return Err(diagnose::connect_failed(&addr, tls, e).await),
        };
        let info: String = match redis::cmd("INFO").arg("cluster").query_async(&mut conn).await {
            Ok(i) => i,
            // A password missing, or a TLS port: named. INFO refused otherwise (an ACL user
            // without @dangerous, a renamed command): nothing to tell, the connection serves.
            Err(e) if diagnose::credentials(&addr, &e).is_some() || e.is_io_error() || e.is_connection_dropped() => {
                return Err(diagnose::connect_failed(&addr, tls, e).await)
            }
            Err(e) => {
                tracing::debug!(error = %e, "INFO cluster refused: the URL's kind is not checked");
                return Ok(conn);
            }
        };
        match diagnose::plain_url_at_cluster_node(&addr, &info) {
            Some(d) => Err(StoreError::Misconfigured(d)),
            None => Ok(conn),
        }
    }

    /// A store on an embedded engine (the same scripts, run in-process).
    #[cfg(feature = "embedded")]
    pub fn embedded(engine: Arc<MemEngine>, keys: Keys, cfg: StoreConfig) -> Self {
        Self::on(Conn::Mem(engine), keys, cfg)
    }

    fn on(conn: Conn, keys: Keys, cfg: StoreConfig) -> Self {
        Self {
            engine: Engine {
                conn,
                ack: cfg.replica_ack,
            },
            keys,
            cfg,
            scripts: Arc::new(Scripts::new()),
            naming: Arc::default(),
        }
    }

    /// The embedded engine this store runs on, if it is not Redis.
    #[cfg(feature = "embedded")]
    pub fn mem_engine(&self) -> Option<&Arc<MemEngine>> {
        match &self.engine.conn {
            Conn::Mem(m) => Some(m),
            Conn::Redis(_) | Conn::Cluster(_) => None,
        }
    }

    /// True when the store runs on a Redis Cluster.
    pub fn is_cluster(&self) -> bool {
        matches!(self.engine.conn, Conn::Cluster(_))
    }

    /// Runs one plain command (demo effects, the load generator, tests).
    pub async fn query<T: redis::FromRedisValue>(&self, cmd: &redis::Cmd) -> Result<T, StoreError> {
        self.engine.query(cmd).await
    }

    /// Runs a pipeline of plain commands in one round trip and converts the replies.
    pub async fn pipeline<T: redis::FromRedisValue>(&self, pipe: &redis::Pipeline) -> Result<T, StoreError> {
        self.engine.pipeline(pipe).await
    }

    /// The key layout.
    pub fn keys(&self) -> &Keys {
        &self.keys
    }

    /// The timing settings.
    pub fn config(&self) -> &StoreConfig {
        &self.cfg
    }

    /// A script invocation for a lease holder: the run's four keys, then thread, owner,
    /// fence and the version read (the compare-and-swap and fencing arguments).
    pub(super) fn fenced<'a>(script: &'a scripts::ScriptDef, lease: &Lease) -> Invocation<'a> {
        let k = &lease.keys;
        let mut inv = script.prepare_invoke();
        inv.key(&k.run).key(&k.due).key(&k.events).key(&k.signals);
        inv.key(&k.blocked).key(&k.waiting);
        inv.arg(lease.thread.as_str())
            .arg(&lease.owner)
            .arg(lease.fence)
            .arg(lease.version);
        inv
    }

    /// The first of the journal entries a write appends from index `first`: its index and
    /// (sealed) bytes, or two empty strings when there are none. The rest go at the end of
    /// the arguments ([`ScriptStore::more_entries`]).
    pub(super) fn entry_args(&self, inv: &mut Invocation<'_>, thread: &ThreadId, entries: Option<(u32, &[Entry])>) {
        match entries.and_then(|(first, es)| Some((first, es.first()?))) {
            Some((first, e)) => inv.arg(first).arg(self.seal_entry(thread, first, e)),
            None => inv.arg("").arg(""),
        };
    }

    /// The entries after the first (sealed, in journal order), as the script's last arguments.
    pub(super) fn more_entries(&self, inv: &mut Invocation<'_>, thread: &ThreadId, entries: Option<(u32, &[Entry])>) {
        let Some((first, entries)) = entries else { return };
        for (i, e) in (first..).zip(entries).skip(1) {
            inv.arg(self.seal_entry(thread, i, e));
        }
    }

    pub(super) async fn invoke(&self, inv: &Invocation<'_>) -> Result<Reply, StoreError> {
        Reply::new(self.engine.eval(inv).await?)
    }

    /// Runs a compare-and-swap write under `lease`: on `ok`, the lease takes the run's new
    /// version; otherwise the refusal, named ([`ScriptStore::rejected`]).
    pub(super) async fn versioned_write(&self, inv: &Invocation<'_>, lease: &mut Lease) -> Result<(), StoreError> {
        let r = self.invoke(inv).await?;
        if r.tag() == "ok" {
            lease.version = r.num(1);
            Ok(())
        } else {
            Err(self.rejected(lease, &r))
        }
    }

    pub(crate) fn rejected(&self, lease: &Lease, r: &Reply) -> StoreError {
        let thread = lease.thread.to_string();
        match r.tag().as_str() {
            "missing" => StoreError::Missing(thread),
            "fenced" => StoreError::Fenced {
                thread,
                status: r.text(1),
                owner: r.text(2),
                fence: r.text(3),
            },
            "conflict" => StoreError::Conflict {
                thread,
                version: r.text(1),
            },
            "index" => StoreError::Index {
                thread,
                steps: r.num(1) as u32,
            },
            "unused" => StoreError::UnusedIntent {
                index: r.num(1) as u32,
                fence: r.num(2),
            },
            other => StoreError::Reply(format!("unexpected reply {other:?}")),
        }
    }
}
