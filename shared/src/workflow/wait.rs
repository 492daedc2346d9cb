//! Durable timers, human-in-the-loop waits, recorded values and code-version markers.

use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::{json, Value};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use uuid::Uuid;

use super::ctx::{decode_outcome, Core, Reader, SliceExit};
use super::Ctx;
use super::{Interrupt, Signal, WaitCall, WorkflowError};
use crate::journal::{Entry, EntryKind, Outcome};
use savepoint_core::model::{Finish, RunStatus, Wait};
use savepoint_core::outcome::Suspend;

impl Ctx {
    /// Pauses for a human: the run waits (status `waiting`, the payload shown by the API)
    /// until `POST /v1/runs/{thread}/resume {"value"}`; returns that value, journaled. The
    /// payload is any `Serialize` value (a question, the facts to decide on). Runs when
    /// awaited; `.within(timeout)` gives the wait a durable deadline
    /// ([`WaitCall::within`](super::WaitCall::within)).
    ///
    /// `handle` is an [`Interrupt<T>`] constant (the answer's type is its `T`), or a name.
    pub fn interrupt<T>(&self, handle: impl Into<Interrupt<T>>, payload: impl Serialize) -> WaitCall<'_, T> {
        let handle = handle.into();
        let name = handle.name().to_owned();
        let payload = payload_value(&name, payload);
        WaitCall::new(self, EntryKind::Interrupt, format!("i:{name}"), name, payload)
    }

    /// Waits for the named signal (`POST /v1/runs/{thread}/signals/{name}`); signals sent
    /// before the run asks are kept, in order. Runs when awaited; `.within(timeout)` gives
    /// the wait a durable deadline.
    ///
    /// `handle` is a [`Signal<T>`] constant (the value's type is its `T`), or a name.
    pub fn wait_signal<T>(&self, handle: impl Into<Signal<T>>) -> WaitCall<'_, T> {
        let handle = handle.into();
        let name = handle.name().to_owned();
        WaitCall::new(self, EntryKind::Signal, format!("s:{name}:"), name, Ok(Value::Null))
    }

    /// A durable timer: the run sleeps in Redis (no worker holds it) and resumes after `d`.
    pub async fn sleep(&self, name: &str, d: Duration) -> Result<(), WorkflowError> {
        self.exclusive(name).await.sleep(name, d).await
    }

    /// The time now by the store server's clock, recorded so a replay sees the same time. A
    /// recorded value that is not a time is an error ([`WorkflowError::Decode`]), never a
    /// default.
    pub async fn now(&self) -> Result<SystemTime, WorkflowError> {
        self.exclusive("now").await.now().await
    }

    /// A random UUID (version 4), recorded: a replay sees the same one, so an effect key made
    /// from it is stable. A recorded value that is not a UUID is an error, never a default.
    pub async fn uuid(&self) -> Result<Uuid, WorkflowError> {
        self.exclusive("uuid").await.uuid().await
    }

    /// A random number in [0, 1), recorded. A recorded value that is not a number in [0, 1)
    /// is an error, never a default.
    pub async fn random(&self) -> Result<f64, WorkflowError> {
        self.exclusive("random").await.random().await
    }

    /// Code-version branching for in-flight runs: true for runs that reach this point under
    /// code that has the change, false for runs whose journal was written before it.
    ///
    /// The answer is sticky per run: the first `patched(id)` decides (a marker in the
    /// journal, or its absence where the old code ran), and every later call with the same id
    /// in the same run answers the same, so a run never takes the old path before a point and
    /// the new one after it. Each slice replays from the top, so the decision is re-derived
    /// from the journal every time.
    pub async fn patched(&self, change_id: &str) -> bool {
        self.exclusive(change_id).await.patched(change_id).await
    }
}

impl Core {
    /// [`Ctx::sleep`]'s work, the state held.
    pub(super) async fn sleep(&mut self, name: &str, d: Duration) -> Result<(), WorkflowError> {
        // (A sleep that parks goes on here in the run's next slice, which replays its entry.)
        loop {
            if self.replayed(name, EntryKind::Sleep).await.is_some() {
                return Ok(());
            }
            self.before_live(name).await;
            let ms = d.as_millis() as u64;
            let entry = Entry::new(
                name,
                EntryKind::Sleep,
                Outcome::Ok(json!({"duration_ms": ms, "wake_at": self.server_now_ms() + ms})),
                1,
            );
            let r = self
                .suspend_run(Some(entry), Suspend::until(RunStatus::Sleeping, d), ("slept", name))
                .await;
            match r {
                Ok(s) => self.park(SliceExit::Suspended { woke: s.woke, rv: s.rv }, true).await,
                Err(e) => self.store_failed(e).await,
            }
        }
    }

    /// Waits for an interrupt's answer or a signal with no deadline (what awaiting a
    /// [`WaitCall`] does).
    pub(super) async fn await_answer<T: DeserializeOwned + 'static>(
        &mut self,
        kind: EntryKind,
        name: &str,
        field: String,
        payload: Value,
    ) -> Result<T, WorkflowError> {
        let o = self.await_value::<T>(kind, name, field, payload, None).await;
        decode_outcome(kind.as_str(), name, o)
    }

    /// The same with a durable deadline: `Ok(None)` if nothing came within `timeout`. The
    /// deadline is journaled first (the value `<name>.deadline`), so a run resumed later keeps
    /// it; the run waits in Redis with the deadline as its due time, and the scanner hands it
    /// to a worker when it passes (no worker holds it meanwhile).
    pub(super) async fn await_answer_within<T: DeserializeOwned + 'static>(
        &mut self,
        kind: EntryKind,
        name: &str,
        field: String,
        payload: Value,
        timeout: Duration,
    ) -> Result<Option<T>, WorkflowError> {
        self.await_within(kind, name, field, payload, timeout).await
    }

    async fn await_within<T: DeserializeOwned + 'static>(
        &mut self,
        kind: EntryKind,
        name: &str,
        field: String,
        payload: Value,
        timeout: Duration,
    ) -> Result<Option<T>, WorkflowError> {
        let now = self.server_now_ms();
        let deadline = self
            .recorded(&format!("{name}.deadline"), || json!(now + timeout.as_millis() as u64))
            .await
            .as_u64()
            .unwrap_or(0);
        // A timed wait journals `{"answer": value}` or `{"timed_out": true}`.
        match self.await_value::<T>(kind, name, field, payload, Some(deadline)).await {
            Outcome::Ok(v) if v.get("timed_out") == Some(&Value::Bool(true)) => Ok(None),
            Outcome::Ok(v) => {
                let answer = v.get("answer").cloned().unwrap_or(Value::Null);
                decode_outcome(kind.as_str(), name, Outcome::Ok(answer)).map(Some)
            }
            err => decode_outcome(kind.as_str(), name, err),
        }
    }

    /// Waits for a value (an interrupt's answer or a signal) and returns its journaled
    /// outcome; with a `deadline` (server ms), the outcome is the timed form.
    async fn await_value<T: DeserializeOwned + 'static>(
        &mut self,
        kind: EntryKind,
        name: &str,
        field: String,
        payload: Value,
        deadline: Option<u64>,
    ) -> Outcome {
        // (A wait that parks goes on here in the run's next slice, with its signals.)
        loop {
            if let Some(e) = self.replayed(name, kind).await {
                let reader = Reader::of::<T>();
                return match e.outcome {
                    // A timed wait journals `{"answer": value}`: the answer is the typed value.
                    Outcome::Ok(mut v) if deadline.is_some() => {
                        if let Some(answer) = v.get_mut("answer") {
                            *answer = self.upgraded(reader, (kind, name), e.tv, answer.take()).await;
                        }
                        Outcome::Ok(v)
                    }
                    Outcome::Ok(v) => Outcome::Ok(self.upgraded(reader, (kind, name), e.tv, v).await),
                    err => err,
                };
            }
            self.before_live(name).await;
            if let Some(sent) = self.take_sent(kind, &field) {
                return self.receive::<T>(kind, name, sent, payload, deadline).await;
            }
            let now = self.server_now_ms();
            if let Some(d) = deadline.filter(|d| now >= *d) {
                return self.time_out(kind, name, d).await;
            }
            let due_in = deadline.map(|d| d.saturating_sub(now));
            self.suspend_waiting(kind, name, payload.clone(), due_in).await;
        }
    }

    /// Takes the value already sent for `field` out of the buffer, if any: (field, value). An
    /// interrupt's answer has one field; a signal's values queue under the field as a prefix.
    fn take_sent(&mut self, kind: EntryKind, field: &str) -> Option<(String, Value)> {
        let found = if kind == EntryKind::Interrupt {
            self.p.signals.get_key_value(field).map(|(k, v)| (k.clone(), v.clone()))
        } else {
            self.buffered(field)
        };
        if let Some((f, _)) = &found {
            self.p.signals.remove(f);
        }
        found
    }

    /// Journals the value sent to the wait (consuming its buffered field), or blocks the run
    /// if it does not decode into `T`.
    async fn receive<T: DeserializeOwned + 'static>(
        &mut self,
        kind: EntryKind,
        name: &str,
        (f, v): (String, Value),
        payload: Value,
        deadline: Option<u64>,
    ) -> Outcome {
        if let Err(e) = serde_json::from_value::<T>(v.clone()) {
            // A wrong-shaped answer must not end the run: it is dropped and the run is
            // blocked, still waiting, so the next answer resumes it.
            let reason = format!(
                "the value sent to {} {name:?} does not decode: {e}; send it again with the right shape (the run \
                 still waits for it)",
                kind.as_str()
            );
            let wait = Wait {
                kind: kind.as_str().to_owned(),
                name: name.to_owned(),
                payload,
            };
            let how = Finish::Rejected {
                reason: &reason,
                wait: &wait,
                consumed: &f,
            };
            return self.block_as(&reason, how).await;
        }
        let event = if kind == EntryKind::Interrupt {
            "interrupt_answered"
        } else {
            "signal_received"
        };
        let v = if deadline.is_some() { json!({ "answer": v }) } else { v };
        let tv = self.stamp(Reader::of::<T>()).await;
        let entry = Entry::new(name, kind, Outcome::Ok(v.clone()), 1).with_value_version(tv);
        self.commit(entry, event, Some(&f)).await;
        Outcome::Ok(v)
    }

    /// Journals that the wait's deadline `d` passed with no value.
    async fn time_out(&mut self, kind: EntryKind, name: &str, d: u64) -> Outcome {
        let v = json!({ "timed_out": true, "deadline": d });
        self.commit(
            Entry::new(name, kind, Outcome::Ok(v.clone()), 1),
            "wait_timed_out",
            None,
        )
        .await;
        Outcome::Ok(v)
    }

    /// Suspends the run as waiting for the value (due in `due_in_ms` if the wait has a
    /// deadline) and stops the slice; returns in the run's next slice if it parks.
    async fn suspend_waiting(&mut self, kind: EntryKind, name: &str, payload: Value, due_in_ms: Option<u64>) {
        let wait = Wait {
            kind: kind.as_str().to_owned(),
            name: name.to_owned(),
            payload,
        };
        let event = if kind == EntryKind::Interrupt {
            "interrupted"
        } else {
            "waiting_signal"
        };
        let how = Suspend {
            due_in: due_in_ms.map(Duration::from_millis),
            ..Suspend::waiting(&wait)
        };
        let r = self.suspend_run(None, how, (event, name)).await;
        match r {
            Ok(s) => self.park(SliceExit::Suspended { woke: s.woke, rv: s.rv }, false).await,
            Err(e) => self.store_failed(e).await,
        }
    }

    pub(super) async fn recorded(&mut self, name: &str, make: impl FnOnce() -> Value) -> Value {
        if let Some(e) = self.replayed(name, EntryKind::Value).await {
            if let Outcome::Ok(v) = e.outcome {
                return v;
            }
        }
        self.before_live(name).await;
        let v = make();
        self.commit(
            Entry::new(name, EntryKind::Value, Outcome::Ok(v.clone()), 1),
            "value_recorded",
            None,
        )
        .await;
        v
    }

    /// [`Ctx::now`]'s work, the state held.
    pub(super) async fn now(&mut self) -> Result<SystemTime, WorkflowError> {
        let now = self.server_now_ms();
        let v = self.recorded("now", || json!(now)).await;
        let ms = v
            .as_u64()
            .ok_or_else(|| recorded_wrong("now", &v, "milliseconds since the Unix epoch"))?;
        Ok(UNIX_EPOCH + Duration::from_millis(ms))
    }

    /// [`Ctx::uuid`]'s work, the state held.
    pub(super) async fn uuid(&mut self) -> Result<Uuid, WorkflowError> {
        let v = self
            .recorded("uuid", || json!(savepoint_core::entropy::uuid().to_string()))
            .await;
        v.as_str()
            .and_then(|s| Uuid::parse_str(s).ok())
            .ok_or_else(|| recorded_wrong("uuid", &v, "a UUID"))
    }

    /// [`Ctx::random`]'s work, the state held.
    pub(super) async fn random(&mut self) -> Result<f64, WorkflowError> {
        let v = self.recorded("random", || json!(savepoint_core::entropy::f64())).await;
        v.as_f64()
            .filter(|x| (0.0..1.0).contains(x))
            .ok_or_else(|| recorded_wrong("random", &v, "a number in [0, 1)"))
    }

    /// [`Ctx::patched`]'s work, the state held.
    pub(super) async fn patched(&mut self, change_id: &str) -> bool {
        match self.p.journal.get(self.cursor as usize) {
            Some(e) if e.kind == EntryKind::Patch && e.name == change_id => {
                self.cursor += 1;
                self.patches.insert(change_id.to_owned(), true);
                true
            }
            _ if self.patches.contains_key(change_id) => self.patches[change_id],
            Some(_) => {
                self.patches.insert(change_id.to_owned(), false);
                false
            }
            None => {
                self.before_live(change_id).await;
                self.commit(
                    Entry::new(change_id, EntryKind::Patch, Outcome::Ok(Value::Bool(true)), 1),
                    "patched",
                    None,
                )
                .await;
                self.patches.insert(change_id.to_owned(), true);
                true
            }
        }
    }
}

/// A recorded value of `name` that is not what the call returns (`expected`).
fn recorded_wrong(name: &str, v: &Value, expected: &str) -> WorkflowError {
    WorkflowError::Decode {
        name: name.to_owned(),
        message: format!("recorded {v}, expected {expected}"),
    }
}

/// An interrupt's payload as JSON; one that does not encode (a map with non-string keys, a
/// failing `Serialize`) is the workflow's error.
fn payload_value(name: &str, payload: impl Serialize) -> Result<Value, WorkflowError> {
    serde_json::to_value(payload).map_err(|e| {
        WorkflowError::failed(format!(
            "the payload of interrupt {name:?} does not encode as JSON: {e}"
        ))
    })
}
