//! The seam under the store: where its scripts and reads are carried out.
//!
//! [`ScriptStore`](super::ScriptStore) builds every state change as one invocation of a Lua
//! script and every read as a plain command, then hands it to an [`Engine`]: Redis over a
//! multiplexed connection, a Redis Cluster, or the embedded engine that runs the very same Lua files over an
//! in-memory keyspace. Argument building and reply parsing are shared, so the two backends can
//! only differ in the command semantics themselves, which the conformance suite pins down.

use crate::RedisResultExt;
use redis::aio::ConnectionManager;
use redis::cluster_routing::{Route, RoutingInfo, SingleNodeRoutingInfo};
use redis::{FromRedisValue, ToRedisArgs, Value};
use std::collections::HashMap;
#[cfg(feature = "embedded")]
use std::sync::Arc;
use std::time::Duration;

use super::{cluster, StoreError};
#[cfg(feature = "embedded")]
use crate::mem::MemEngine;

/// One Lua script of the store: its name, the Redis handle (EVALSHA) and the full source.
pub(crate) struct ScriptDef {
    pub(crate) name: &'static str,
    pub(crate) redis: redis::Script,
    #[cfg_attr(not(feature = "embedded"), allow(dead_code))]
    pub(crate) body: String,
}

impl ScriptDef {
    pub(crate) fn new(name: &'static str, body: String) -> Self {
        Self {
            name,
            redis: redis::Script::new(&body),
            body,
        }
    }

    /// Starts an invocation (keys, then arguments).
    pub(crate) fn prepare_invoke(&self) -> Invocation<'_> {
        Invocation {
            script: self,
            keys: Vec::new(),
            args: Vec::new(),
        }
    }
}

/// A script call being built: the same `key`/`arg` builder as `redis::ScriptInvocation`.
pub(crate) struct Invocation<'a> {
    script: &'a ScriptDef,
    keys: Vec<Vec<u8>>,
    args: Vec<Vec<u8>>,
}

impl Invocation<'_> {
    pub(crate) fn key<T: ToRedisArgs>(&mut self, key: T) -> &mut Self {
        self.keys.extend(key.to_redis_args());
        self
    }

    pub(crate) fn arg<T: ToRedisArgs>(&mut self, arg: T) -> &mut Self {
        self.args.extend(arg.to_redis_args());
        self
    }
}

/// Which writes wait for replicas (`WAIT`) before the store reports them done.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AckScope {
    /// The effect protocol's writes: the intent (before the effect runs) and done (before
    /// the run moves on). What a lost write of these costs is an effect run twice.
    Effects,
    /// Every script (commits, claims, suspensions too). What a lost write of these costs is
    /// a step run again, so most deployments leave this off.
    Writes,
}

/// Replication acknowledgement: after a write in scope, `WAIT replicas timeout` on the same
/// connection, and a write fewer replicas confirmed in time is reported as
/// [`StoreError::NotReplicated`] (transient: the caller retries the idempotent script).
#[derive(Debug, Clone, Copy)]
pub struct ReplicaAck {
    /// Replicas that must confirm (1 = the usual one replica per master).
    pub replicas: u32,
    /// How long to wait for them.
    pub timeout: Duration,
    /// Which writes wait.
    pub scope: AckScope,
}

impl ReplicaAck {
    fn covers(&self, script: &str) -> bool {
        match self.scope {
            AckScope::Writes => !matches!(script, "due_candidates" | "live_workers"),
            AckScope::Effects => matches!(script, "effect_intent" | "effect_begin" | "effect_done"),
        }
    }
}

/// The connection commands run on.
#[derive(Clone)]
pub(crate) enum Conn {
    /// A Redis server (or a Redis-compatible one) over an auto-reconnecting connection.
    Redis(ConnectionManager),
    /// A Redis Cluster (see [`super::cluster`]): commands go to the master of their slot.
    Cluster(cluster::ClusterConn),
    /// The embedded engine (see `crate::mem`, feature `embedded`).
    #[cfg(feature = "embedded")]
    Mem(Arc<MemEngine>),
}

/// Where commands run, and whether writes wait for replicas.
#[derive(Clone)]
pub(crate) struct Engine {
    pub(crate) conn: Conn,
    pub(crate) ack: Option<ReplicaAck>,
}

#[cfg(feature = "embedded")]
fn raw_args(cmd: &redis::Cmd) -> Vec<Vec<u8>> {
    cmd.args_iter()
        .map(|a| match a {
            redis::Arg::Simple(b) => b.to_vec(),
            _ => b"0".to_vec(),
        })
        .collect()
}

fn reply<T: FromRedisValue>(v: Value) -> Result<T, StoreError> {
    redis::from_redis_value(v).map_err(|e| StoreError::Reply(e.to_string()))
}

impl Engine {
    /// Runs a script (all its keys in one slot, checked on every backend), then waits for
    /// replicas if the script is in the acknowledgement's scope.
    pub(crate) async fn eval(&self, inv: &Invocation<'_>) -> Result<Value, StoreError> {
        cluster::one_slot(inv.script.name, &inv.keys)?;
        let invocation = || {
            let mut ri = inv.script.redis.prepare_invoke();
            for k in &inv.keys {
                ri.key(k.as_slice());
            }
            for a in &inv.args {
                ri.arg(a.as_slice());
            }
            ri
        };
        let ack = self.ack.filter(|a| a.covers(inv.script.name));
        let wait = |a: ReplicaAck| {
            let mut c = redis::cmd("WAIT");
            c.arg(a.replicas).arg(a.timeout.as_millis() as u64);
            c
        };
        let out = match &self.conn {
            Conn::Redis(conn) => {
                let mut conn = conn.clone();
                let out = invocation().invoke_async(&mut conn).await.store()?;
                if let Some(a) = ack {
                    let acked: u32 = wait(a).query_async(&mut conn).await.store()?;
                    check_acked(a, acked)?;
                }
                out
            }
            Conn::Cluster(c) => {
                let mut conn = c.get();
                let out = c.seen(invocation().invoke_async(&mut conn).await).store()?;
                if let (Some(a), Some(key)) = (ack, inv.keys.first()) {
                    let acked = c
                        .seen(conn.route_command(wait(a), cluster::master_of(key)).await)
                        .store()?;
                    check_acked(a, reply(acked)?)?;
                }
                out
            }
            #[cfg(feature = "embedded")]
            Conn::Mem(m) => m.eval(inv.script.name, &inv.script.body, &inv.keys, &inv.args).await?,
        };
        Ok(out)
    }

    /// Runs a script and converts its reply.
    pub(crate) async fn eval_as<T: FromRedisValue>(&self, inv: &Invocation<'_>) -> Result<T, StoreError> {
        reply(self.eval(inv).await?)
    }

    /// Runs one plain command and converts its reply.
    pub(crate) async fn query<T: FromRedisValue>(&self, cmd: &redis::Cmd) -> Result<T, StoreError> {
        match &self.conn {
            Conn::Redis(conn) => Ok(cmd.query_async(&mut conn.clone()).await.store()?),
            Conn::Cluster(c) => Ok(c.seen(cmd.query_async(&mut c.get()).await).store()?),
            #[cfg(feature = "embedded")]
            Conn::Mem(m) => reply(m.command(&raw_args(cmd)).await?),
        }
    }

    /// Runs one plain command on the node at `host:port` of a cluster (`SCAN` of one master).
    pub(crate) async fn query_node<T: FromRedisValue>(
        &self,
        cmd: &redis::Cmd,
        host: &str,
        port: u16,
    ) -> Result<T, StoreError> {
        match &self.conn {
            Conn::Cluster(c) => {
                let route = RoutingInfo::SingleNode(SingleNodeRoutingInfo::ByAddress {
                    host: host.to_owned(),
                    port,
                });
                reply(c.seen(c.get().route_command(cmd.clone(), route).await).store()?)
            }
            _ => self.query(cmd).await,
        }
    }

    /// Runs a pipeline (one round trip per node; not a transaction) and converts its replies.
    /// On a cluster the commands are split by slot into one pipeline per slot, sent at once,
    /// and their replies put back in order. (`ignore()` on a command is not supported: every
    /// command's reply is returned.)
    pub(crate) async fn pipeline<T: FromRedisValue>(&self, pipe: &redis::Pipeline) -> Result<T, StoreError> {
        match &self.conn {
            Conn::Redis(conn) => Ok(pipe.query_async(&mut conn.clone()).await.store()?),
            Conn::Cluster(c) => {
                let mut groups: HashMap<Route, (redis::Pipeline, Vec<usize>)> = HashMap::new();
                for (i, c) in pipe.cmd_iter().enumerate() {
                    let (p, at) = groups
                        .entry(cluster::route_of(c))
                        .or_insert_with(|| (redis::pipe(), Vec::new()));
                    p.add_command(c.clone());
                    at.push(i);
                }
                let sent = groups.into_values().map(|(p, at)| {
                    let mut conn = c.get();
                    async move {
                        let replies: Vec<Value> = c.seen(p.query_async(&mut conn).await).store()?;
                        Ok::<_, StoreError>((at, replies))
                    }
                });
                let mut out = vec![Value::Nil; pipe.len()];
                for (at, replies) in futures::future::try_join_all(sent).await? {
                    for (i, v) in at.into_iter().zip(replies) {
                        out[i] = v;
                    }
                }
                reply(Value::Array(out))
            }
            #[cfg(feature = "embedded")]
            Conn::Mem(m) => {
                let mut out = Vec::new();
                for c in pipe.cmd_iter() {
                    out.push(m.command(&raw_args(c)).await?);
                }
                reply(Value::Array(out))
            }
        }
    }
}

fn check_acked(a: ReplicaAck, acked: u32) -> Result<(), StoreError> {
    if acked >= a.replicas {
        Ok(())
    } else {
        Err(StoreError::NotReplicated {
            wanted: a.replicas,
            acked,
            timeout_ms: a.timeout.as_millis() as u64,
        })
    }
}
