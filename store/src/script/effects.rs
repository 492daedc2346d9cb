//! Effect dedup records (ARCHITECTURE §8): begin (the key recorded in the run) → intent →
//! done + recorded result, each write fenced by the attempt that took the intent.

use serde_json::Value;

use super::{ms, ScriptStore};
use crate::{EffectClaim, Holder, Lease, StoreError};
use savepoint_core::ids::{EffectKey, ThreadId};
use savepoint_core::outcome::{EffectDone, EffectRecord, EffectRelease, EffectUnused};

fn index_arg(index: Option<u32>) -> String {
    index.map(|i| i.to_string()).unwrap_or_default()
}

fn holder(r: &super::reply::Reply, at: usize) -> Holder {
    Holder {
        thread: r.text(at),
        index: r.text(at + 1).parse().unwrap_or(-1),
        fence: r.text(at + 2).parse().unwrap_or(0),
    }
}

impl ScriptStore {
    /// Records in the run that journal `index` performs the effect `key` (before taking its
    /// intent), extending the lease. `Ok(Some(old))` when the index already recorded another
    /// key: the code now derives a different key for the same call (non-determinism).
    pub async fn effect_begin(
        &self,
        lease: &Lease,
        index: u32,
        key: &EffectKey,
        name: &str,
    ) -> Result<Option<String>, StoreError> {
        let k = &lease.keys;
        let mut inv = self.scripts.effect_begin.prepare_invoke();
        inv.key(&k.run).key(&k.due);
        inv.arg(lease.thread.as_str()).arg(&lease.owner).arg(lease.fence);
        inv.arg(index).arg(key.as_str());
        inv.arg(ms(self.cfg.lease)).arg(ms(self.cfg.grace)).arg(name);
        let r = self.invoke(&inv).await?;
        match r.tag().as_str() {
            "ok" => Ok(None),
            "key_changed" => Ok(Some(r.text(1))),
            _ => Err(self.rejected(lease, &r)),
        }
    }

    /// The key of the effect the run began at journal `index` and has not journaled yet
    /// (`x:<index>`, see [`Self::effect_begin`]): what a running or crashed attempt holds.
    pub async fn effect_begun(&self, thread: &ThreadId, index: u32) -> Result<Option<String>, StoreError> {
        let k = self.keys.run(thread);
        self.engine
            .query(redis::cmd("HGET").arg(&k.run).arg(format!("x:{index}")))
            .await
    }

    /// The keys of the effects the run began at journal indexes `from..from + n` and has not
    /// journaled (see [`Self::effect_begun`]), by index: a crashed attempt's calls side by side.
    pub async fn effects_begun(&self, thread: &ThreadId, from: u32, n: u32) -> Result<Vec<(u32, String)>, StoreError> {
        let k = self.keys.run(thread);
        let mut cmd = redis::cmd("HMGET");
        cmd.arg(&k.run);
        for i in from..from.saturating_add(n) {
            cmd.arg(format!("x:{i}"));
        }
        let keys: Vec<Option<String>> = self.engine.query(&cmd).await?;
        Ok((from..).zip(keys).filter_map(|(i, k)| k.map(|k| (i, k))).collect())
    }

    /// The name of the effect whose key the run recorded at `index` (see [`Self::effect_begin`]).
    pub async fn effect_name(&self, thread: &ThreadId, index: u32) -> Result<Option<String>, StoreError> {
        let k = self.keys.run(thread);
        self.engine
            .query(redis::cmd("HGET").arg(&k.run).arg(format!("n:{index}")))
            .await
    }

    /// Records the intent to perform the effect `key` at journal `index` of `thread` under
    /// fence `fence` (SET NX; an intent never expires). `takeover` re-arms an in-doubt intent
    /// of this run's earlier attempt (policies `retry_safe` and `reconcile`); it only succeeds
    /// for a higher fence than the holder's. Idempotent: retrying after a lost reply answers
    /// `Won` again.
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
        inv.arg(thread.as_str()).arg(index).arg(fence);
        inv.arg(if takeover { "takeover" } else { "claim" });
        let r = self.invoke(&inv).await?;
        Ok(match r.tag().as_str() {
            "won" => EffectClaim::Won,
            "done" => EffectClaim::Done(self.open_effect(key, &r.text(1))?),
            "in_doubt" => EffectClaim::InDoubt(holder(&r, 1)),
            "stale" => EffectClaim::Stale(r.num(1)),
            "self" => EffectClaim::SelfHeld(r.num(1) as u32),
            "orphaned" => EffectClaim::Orphaned(holder(&r, 1), r.text(4)),
            "busy" => EffectClaim::Busy(holder(&r, 1)),
            other => return Err(StoreError::Reply(format!("effect_intent: {other}"))),
        })
    }

    /// Marks the effect done with its result, for the attempt (`index`, `fence`) that holds
    /// the intent. Idempotent for that attempt (a retry after a lost reply answers
    /// `Already` with its own result).
    pub async fn effect_done(
        &self,
        key: &EffectKey,
        thread: &ThreadId,
        index: u32,
        fence: u64,
        result: &Value,
    ) -> Result<EffectDone, StoreError> {
        self.effect_done_inner(key, thread, Some(index), fence, result, None)
            .await
    }

    /// An operator (or a reconcile function) settles an in-doubt effect as applied with this
    /// result. With `expect`, only if the record is still the one held by that holder.
    pub async fn settle_done(
        &self,
        key: &EffectKey,
        thread: &ThreadId,
        result: &Value,
        expect: Option<&Holder>,
    ) -> Result<EffectDone, StoreError> {
        self.effect_done_inner(key, thread, None, 0, result, expect).await
    }

    async fn effect_done_inner(
        &self,
        key: &EffectKey,
        thread: &ThreadId,
        index: Option<u32>,
        fence: u64,
        result: &Value,
        expect: Option<&Holder>,
    ) -> Result<EffectDone, StoreError> {
        let mut inv = self.scripts.effect_done.prepare_invoke();
        inv.key(self.keys.effect(key));
        inv.arg(thread.as_str()).arg(index_arg(index)).arg(fence);
        inv.arg(self.seal_effect(key, result.to_string()));
        inv.arg(expect.map(Holder::token).unwrap_or_default());
        let r = self.invoke(&inv).await?;
        Ok(match r.tag().as_str() {
            "ok" => EffectDone::Recorded,
            "already" => EffectDone::Already(self.open_effect(key, &r.text(1))?),
            "not_owner" => EffectDone::NotOwner(r.text(1)),
            "stale" => EffectDone::Stale,
            "changed" => EffectDone::Changed(r.text(1)),
            other => return Err(StoreError::Reply(format!("effect_done: {other}"))),
        })
    }

    /// Drops the intent of the attempt (`index`, `fence`) of `thread`: its effect is known not
    /// to have happened. Idempotent (`Absent` after a lost reply).
    pub async fn effect_release(
        &self,
        key: &EffectKey,
        thread: &ThreadId,
        index: u32,
        fence: u64,
    ) -> Result<EffectRelease, StoreError> {
        self.effect_release_inner(key, thread, Some((index, fence)), None).await
    }

    /// An operator settles an in-doubt effect as not applied. With `expect`, only if the
    /// record is still the one held by that holder.
    pub async fn settle_released(
        &self,
        key: &EffectKey,
        thread: &ThreadId,
        expect: Option<&Holder>,
    ) -> Result<EffectRelease, StoreError> {
        self.effect_release_inner(key, thread, None, expect).await
    }

    async fn effect_release_inner(
        &self,
        key: &EffectKey,
        thread: &ThreadId,
        at: Option<(u32, u64)>,
        expect: Option<&Holder>,
    ) -> Result<EffectRelease, StoreError> {
        let mut inv = self.scripts.effect_release.prepare_invoke();
        inv.key(self.keys.effect(key)).arg(thread.as_str());
        inv.arg(index_arg(at.map(|a| a.0))).arg(at.map(|a| a.1).unwrap_or(0));
        inv.arg(expect.map(Holder::token).unwrap_or_default());
        let r = self.invoke(&inv).await?;
        Ok(match r.tag().as_str() {
            "ok" => EffectRelease::Released,
            "absent" => EffectRelease::Absent,
            "done" => EffectRelease::Done(self.open_effect(key, &r.text(1))?),
            "not_owner" => EffectRelease::NotOwner(r.text(1)),
            "changed" => EffectRelease::Changed(r.text(1)),
            other => return Err(StoreError::Reply(format!("effect_release: {other}"))),
        })
    }

    /// Records in the run that its attempt `fence` never called the effect whose intent it
    /// took at journal index `index` (its release failed): a later attempt that finds the
    /// intent in doubt takes it over instead of blocking, and a run already blocked on it is
    /// pending again. Idempotent. Needs no lease: it states a fact about a past attempt.
    pub async fn effect_unused(&self, thread: &ThreadId, index: u32, fence: u64) -> Result<EffectUnused, StoreError> {
        let k = self.keys.run(thread);
        let mut inv = self.scripts.effect_unused.prepare_invoke();
        inv.key(&k.run).key(&k.due).key(&k.events).key(&k.blocked);
        let detail = format!("the attempt with fence {fence} never called the effect at entry {index}");
        inv.arg(thread.as_str())
            .arg(index)
            .arg(fence)
            .arg(ms(self.cfg.redeliver));
        inv.arg(self.cfg.event_cap)
            .arg(self.seal_event(thread, "effect_resolved", &detail).1);
        let r = self.invoke(&inv).await?;
        Ok(match r.tag().as_str() {
            "ok" => EffectUnused::Recorded,
            "unblocked" => EffectUnused::Unblocked(super::control::rerun_at(&r, 1)),
            "missing" => EffectUnused::Missing,
            "ended" => EffectUnused::Ended(r.text(1)),
            other => return Err(StoreError::Reply(format!("effect_unused: {other}"))),
        })
    }

    /// The run `owner` ended (cancelled, expired) while holding the intent at `index`: the
    /// intent becomes an explicit in-doubt record naming it. True when it changed. A done
    /// record of `owner` at `index` (never journaled) gets the effect TTL instead.
    pub async fn effect_orphan(
        &self,
        key: &EffectKey,
        owner: &ThreadId,
        index: u32,
        owner_status: &str,
    ) -> Result<bool, StoreError> {
        let mut inv = self.scripts.effect_orphan.prepare_invoke();
        inv.key(self.keys.effect(key));
        inv.arg(owner.as_str())
            .arg(index)
            .arg(owner_status)
            .arg(ms(self.cfg.effect_ttl));
        Ok(self.invoke(&inv).await?.tag() == "ok")
    }

    /// Takes back an operator's "applied" record whose result the code cannot decode: it
    /// becomes an in-doubt intent of `thread` at `index` under `fence`, for the operator to
    /// resolve again. True when it changed (false: not an operator's done record).
    pub async fn effect_reopen(
        &self,
        key: &EffectKey,
        thread: &ThreadId,
        index: u32,
        fence: u64,
    ) -> Result<bool, StoreError> {
        let mut inv = self.scripts.effect_reopen.prepare_invoke();
        inv.key(self.keys.effect(key));
        inv.arg(thread.as_str()).arg(index).arg(fence);
        Ok(self.invoke(&inv).await?.tag() == "ok")
    }

    /// Deletes the done record of `key` that run `thread` settled, so the effect is performed
    /// again by the next run that reaches it (an operator's `rerun_effects`). False when the
    /// record is absent, not done, or another run's.
    pub async fn effect_forget(&self, key: &EffectKey, thread: &ThreadId) -> Result<bool, StoreError> {
        let mut inv = self.scripts.effect_forget.prepare_invoke();
        inv.key(self.keys.effect(key));
        inv.arg(thread.as_str());
        Ok(self.invoke(&inv).await?.tag() == "ok")
    }

    /// Keeps effect `key`'s record from expiring: a run about to block still needs it as the
    /// only proof its effect happened (its entry is not journaled yet). A record this run wrote
    /// has no expiry until then anyway; this keeps one it found (another run's, journaled
    /// there and so expiring, or one an older build wrote with its expiry).
    pub async fn effect_keep(&self, key: &EffectKey) -> Result<(), StoreError> {
        let _: i64 = self.query(redis::cmd("PERSIST").arg(self.keys.effect(key))).await?;
        Ok(())
    }

    /// Run `thread` journaled its entry at `index` for effect `key`: the done record gets its
    /// expiry (`SAVEPOINT_EFFECT_TTL_SECS`, the dedup window) if that run owns it, or if its
    /// owner journaled it already (`effect_expire.lua`); never an intent. True when it did.
    pub async fn effect_expire(&self, key: &EffectKey, thread: &ThreadId, index: u32) -> Result<bool, StoreError> {
        let mut inv = self.scripts.effect_expire.prepare_invoke();
        inv.key(self.keys.effect(key));
        inv.arg(thread.as_str()).arg(index).arg(ms(self.cfg.effect_ttl));
        Ok(self.invoke(&inv).await?.tag() == "ok")
    }

    /// The raw dedup record of an effect key (JSON), for the API and tests.
    pub async fn effect_record(&self, key: &EffectKey) -> Result<Option<Value>, StoreError> {
        let raw: Option<String> = self.engine.query(redis::cmd("GET").arg(self.keys.effect(key))).await?;
        let Some(raw) = raw else { return Ok(None) };
        let mut v = serde_json::from_str(&raw).unwrap_or(Value::String(raw));
        // The result as it was recorded (JSON text), opened when sealed.
        if let Some(stored) = v.get("result").and_then(Value::as_str).map(str::to_owned) {
            if crate::codec::is_sealed(stored.as_bytes()) {
                let plain = self.open_effect(key, &stored)?;
                v["result"] = Value::String(plain.to_string());
            }
        }
        Ok(Some(v))
    }

    /// The dedup record of an effect key, parsed.
    pub async fn effect_state(&self, key: &EffectKey) -> Result<Option<EffectRecord>, StoreError> {
        let Some(v) = self.effect_record(key).await? else {
            return Ok(None);
        };
        let h = Holder {
            thread: v["thread"].as_str().unwrap_or_default().to_owned(),
            index: v["index"].as_i64().unwrap_or(-1),
            fence: v["fence"].as_u64().unwrap_or(0),
        };
        Ok(Some(match v["state"].as_str() {
            Some("done") => EffectRecord::Done(h, self.open_effect(key, v["result"].as_str().unwrap_or("null"))?),
            Some("orphaned") => EffectRecord::Orphaned(h, v["owner_status"].as_str().unwrap_or_default().to_owned()),
            Some("intent") => EffectRecord::Intent(h),
            other => return Err(StoreError::Corrupt(format!("effect {key}: unknown state {other:?}"))),
        }))
    }
}
