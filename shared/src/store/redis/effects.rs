//! Effect dedup records (DESIGN §6): intent → done + recorded result.

use serde_json::Value;

use super::{ms, RedisStore};
use crate::ids::{EffectKey, ThreadId};
use crate::store::{EffectClaim, StoreError};

/// Outcome of marking an effect done.
#[derive(Debug, Clone, PartialEq)]
pub enum EffectDone {
    /// Recorded.
    Recorded,
    /// It had been marked done before; the first result stands.
    Already(Value),
    /// Another run holds the intent (only when a journal index was given).
    NotOwner(String),
}

fn index_arg(index: Option<u32>) -> String {
    index.map(|i| i.to_string()).unwrap_or_default()
}

impl RedisStore {
    /// Records the intent to perform the effect `key` at journal `index` of `thread` under
    /// fence `fence` (SET NX). `takeover` re-arms an in-doubt intent of this run (policies
    /// `retry_safe` and `reconcile`).
    pub async fn effect_intent(
        &self,
        key: &EffectKey,
        thread: &ThreadId,
        index: u32,
        fence: u64,
        takeover: bool,
    ) -> Result<EffectClaim, StoreError> {
        let mut inv = self.scripts.effect_intent.prepare_invoke();
        inv.key(self.keys.effect(key));
        inv.arg(thread.as_str())
            .arg(index)
            .arg(fence)
            .arg(ms(self.cfg.effect_ttl));
        inv.arg(if takeover { "takeover" } else { "claim" });
        let r = self.invoke(&inv).await?;
        Ok(match r.tag().as_str() {
            "won" => EffectClaim::Won,
            "done" => EffectClaim::Done(parse_result(&r.text(1))),
            "in_doubt" => EffectClaim::InDoubt,
            "busy" => EffectClaim::Busy(r.text(1)),
            other => return Err(StoreError::Reply(format!("effect_intent: {other}"))),
        })
    }

    /// Marks the effect done with its result. `index = None` is an operator settling it.
    pub async fn effect_done(
        &self,
        key: &EffectKey,
        thread: &ThreadId,
        index: Option<u32>,
        result: &Value,
    ) -> Result<EffectDone, StoreError> {
        let mut inv = self.scripts.effect_done.prepare_invoke();
        inv.key(self.keys.effect(key));
        inv.arg(thread.as_str()).arg(index_arg(index)).arg(result.to_string());
        inv.arg(ms(self.cfg.effect_ttl));
        let r = self.invoke(&inv).await?;
        Ok(match r.tag().as_str() {
            "ok" => EffectDone::Recorded,
            "already" => EffectDone::Already(parse_result(&r.text(1))),
            "not_owner" => EffectDone::NotOwner(r.text(1)),
            other => return Err(StoreError::Reply(format!("effect_done: {other}"))),
        })
    }

    /// Drops an intent known not to have been applied. `at = None` is an operator (any
    /// holder); `Some((index, fence))` only frees the caller's own attempt. Returns the
    /// script's tag (`ok`, `absent`, `done`, `not_owner`).
    pub async fn effect_release(
        &self,
        key: &EffectKey,
        thread: &ThreadId,
        at: Option<(u32, u64)>,
    ) -> Result<String, StoreError> {
        let mut inv = self.scripts.effect_release.prepare_invoke();
        inv.key(self.keys.effect(key))
            .arg(thread.as_str())
            .arg(index_arg(at.map(|a| a.0)));
        inv.arg(at.map(|a| a.1.to_string()).unwrap_or_default());
        Ok(self.invoke(&inv).await?.tag())
    }

    /// The raw dedup record of an effect key (JSON), for the API and tests.
    pub async fn effect_record(&self, key: &EffectKey) -> Result<Option<Value>, StoreError> {
        let mut conn = self.connection();
        let raw: Option<String> = redis::cmd("GET")
            .arg(self.keys.effect(key))
            .query_async(&mut conn)
            .await?;
        Ok(raw.map(|s| serde_json::from_str(&s).unwrap_or(Value::String(s))))
    }
}

fn parse_result(s: &str) -> Value {
    serde_json::from_str(s).unwrap_or(Value::Null)
}
