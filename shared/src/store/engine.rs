//! The seam under the store: where its scripts and reads are carried out.
//!
//! [`ScriptStore`](super::ScriptStore) builds every state change as one invocation of a Lua
//! script and every read as a plain command, then hands it to an [`Engine`]: Redis over a
//! multiplexed connection, or the embedded engine that runs the very same Lua files over an
//! in-memory keyspace. Argument building and reply parsing are shared, so the two backends can
//! only differ in the command semantics themselves, which the conformance suite pins down.

use redis::aio::ConnectionManager;
use redis::{FromRedisValue, ToRedisArgs, Value};
use std::sync::Arc;

use super::StoreError;
use crate::embedded::MemEngine;

/// One Lua script of the store: its name, the Redis handle (EVALSHA) and the full source.
pub(crate) struct ScriptDef {
    pub(crate) name: &'static str,
    pub(crate) redis: redis::Script,
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

/// Where commands run.
#[derive(Clone)]
pub(crate) enum Engine {
    /// A Redis server (or a Redis-compatible one) over an auto-reconnecting connection.
    Redis(ConnectionManager),
    /// The embedded engine (see [`crate::embedded`]).
    Mem(Arc<MemEngine>),
}

fn raw_args(cmd: &redis::Cmd) -> Vec<Vec<u8>> {
    cmd.args_iter()
        .map(|a| match a {
            redis::Arg::Simple(b) => b.to_vec(),
            _ => b"0".to_vec(),
        })
        .collect()
}

impl Engine {
    /// Runs a script.
    pub(crate) async fn eval(&self, inv: &Invocation<'_>) -> Result<Value, StoreError> {
        match self {
            Engine::Redis(conn) => {
                let mut ri = inv.script.redis.prepare_invoke();
                for k in &inv.keys {
                    ri.key(k.as_slice());
                }
                for a in &inv.args {
                    ri.arg(a.as_slice());
                }
                let mut conn = conn.clone();
                Ok(ri.invoke_async(&mut conn).await?)
            }
            Engine::Mem(m) => m.eval(inv.script.name, &inv.script.body, &inv.keys, &inv.args).await,
        }
    }

    /// Runs a script and converts its reply.
    pub(crate) async fn eval_as<T: FromRedisValue>(&self, inv: &Invocation<'_>) -> Result<T, StoreError> {
        let v = self.eval(inv).await?;
        redis::from_redis_value(v).map_err(|e| StoreError::Reply(e.to_string()))
    }

    /// Runs one plain command and converts its reply.
    pub(crate) async fn query<T: FromRedisValue>(&self, cmd: &redis::Cmd) -> Result<T, StoreError> {
        match self {
            Engine::Redis(conn) => {
                let mut conn = conn.clone();
                Ok(cmd.query_async(&mut conn).await?)
            }
            Engine::Mem(m) => {
                let v = m.command(&raw_args(cmd)).await?;
                Ok(redis::from_redis_value(v).map_err(|e| StoreError::Reply(e.to_string()))?)
            }
        }
    }

    /// Runs a pipeline (one round trip; not a transaction) and converts its replies.
    /// (`ignore()` on a command is not supported: every command's reply is returned.)
    pub(crate) async fn pipeline<T: FromRedisValue>(&self, pipe: &redis::Pipeline) -> Result<T, StoreError> {
        match self {
            Engine::Redis(conn) => {
                let mut conn = conn.clone();
                Ok(pipe.query_async(&mut conn).await?)
            }
            Engine::Mem(m) => {
                let mut out = Vec::new();
                for c in pipe.cmd_iter() {
                    out.push(m.command(&raw_args(c)).await?);
                }
                Ok(redis::from_redis_value(Value::Array(out)).map_err(|e| StoreError::Reply(e.to_string()))?)
            }
        }
    }
}
