//! Child workflows: `ctx.child` starts another run durably and awaits its output;
//! `ctx.start_child` starts one and goes on.
//!
//! Crash safety comes from the mechanisms a step already has. The child's thread id is derived
//! from the parent's and the call's journal index, so a parent that crashed and replays the
//! call finds the child it started (the create is idempotent) instead of starting another.
//! The parent records the link (`ch:<index>`, fenced) before it creates the child, so a cancel
//! of the parent reaches the child. The child's outcome is kept by the child itself; when the
//! child ends its worker tells the parent (a signal of kind `child`, deduplicated), which wakes
//! it, and a parent that waits also looks at the child again at its poll interval, so a word
//! lost to a crash delays the parent and never strands it. The awaited outcome is journaled in
//! the parent (kind `child`, key = the child's thread id) and replayed from there.

use futures::future::BoxFuture;
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::{json, Value};
use std::time::Duration;

use super::ctx::{decode_outcome, Core, Reader, Recorded, SliceExit};
use super::Ctx;
use super::{Workflow, WorkflowError};
use crate::ids::{stable_hash, ThreadId, MAX_THREAD_ID_LEN};
use crate::journal::{Entry, EntryKind, Outcome};
use savepoint_core::model::{CreateOptions, ParentCancel, ParentLink, Wait};
use savepoint_core::outcome::{child_signal, ChildResult, CreateOutcome, Suspend};

/// Publishes tasks for runs a workflow starts (the worker's broker). Without one (the test
/// kit, the simulator) a child's start task is published by the due scanner's safety net.
pub trait TaskSink: Send + Sync {
    /// Publishes the start task of a run just created, and confirms it to the store.
    fn start(&self, thread: ThreadId, queue: Option<String>) -> BoxFuture<'static, ()>;
}

/// A child run to start: its workflow, version, input and options.
#[derive(Debug, Clone)]
pub struct ChildSpec {
    workflow: String,
    version: u32,
    input: Result<Value, String>,
    thread_id: Option<ThreadId>,
    on_parent_cancel: ParentCancel,
    timeout: Option<Duration>,
    queue: Option<String>,
    input_version: Option<u32>,
    /// The input's type name when `W` declares its version (its run feature).
    input_type: Option<&'static str>,
}

impl ChildSpec {
    /// A run of `W` (at `W::VERSION`) with this input (stamped with the version `W` declares
    /// for its input's type, [`Workflow::versions`]).
    pub fn of<W: Workflow>(input: impl Serialize) -> Self {
        let versions = W::versions();
        Self {
            input_version: versions.version_of::<W::Input>(),
            input_type: versions.name_of::<W::Input>(),
            ..Self::named(W::NAME, W::VERSION, input)
        }
    }

    /// A run of the workflow registered as `workflow` at `version`, with this input (a
    /// workflow this binary does not host: another fleet serves it).
    pub fn named(workflow: &str, version: u32, input: impl Serialize) -> Self {
        Self {
            workflow: workflow.to_owned(),
            version,
            input: serde_json::to_value(input).map_err(|e| e.to_string()),
            thread_id: None,
            on_parent_cancel: ParentCancel::Cancel,
            timeout: None,
            queue: None,
            input_version: None,
            input_type: None,
        }
    }

    /// The version of the input's type this input is at (by [`ChildSpec::of`], the one the
    /// child's workflow declares; by [`ChildSpec::named`], 1 unless given here).
    pub fn input_version(mut self, v: u32) -> Self {
        self.input_version = Some(v);
        self
    }

    /// Its own thread id instead of the derived one (`<parent>.c<index>`). Keep it unique to
    /// this parent and call: a replayed call finds the run by it.
    pub fn thread_id(mut self, t: ThreadId) -> Self {
        self.thread_id = Some(t);
        self
    }

    /// Cancelling the parent leaves this child running (by default it is cancelled too).
    pub fn abandon_on_parent_cancel(mut self) -> Self {
        self.on_parent_cancel = ParentCancel::Abandon;
        self
    }

    /// Start the child on task queue `queue` (by default the parent's home queue).
    pub fn queue(mut self, queue: &str) -> Self {
        self.queue = Some(queue.to_owned());
        self
    }

    /// A run-level timeout for the child (see `POST /v1/runs` `timeout_secs`).
    pub fn timeout(mut self, d: Duration) -> Self {
        self.timeout = Some(d);
        self
    }
}

/// The thread id of the child started by `parent`'s call at `index`: `<parent>.c<index>`, or,
/// when that would be too long, a hash of the parent's id in its place.
pub fn child_thread_id(parent: &ThreadId, index: u32) -> ThreadId {
    let suffix = format!(".c{index}");
    let id = if parent.as_str().len() + suffix.len() <= MAX_THREAD_ID_LEN {
        format!("{parent}{suffix}")
    } else {
        format!("child-{:016x}{suffix}", stable_hash(parent.as_str()))
    };
    ThreadId::new(id).unwrap_or_else(|_| ThreadId::generate("child"))
}

impl Ctx {
    /// Starts a run of `W` with `input` as this run's child and returns its output, or its
    /// failure or cancel as [`WorkflowError::CallFailed`]. The child starts once however often
    /// this run crashes and replays; its outcome is journaled here. The input and output are
    /// the child's own types.
    ///
    /// ```ignore
    /// let price: Price = ctx.child::<Pricing>("price-1", Sku("A".into())).await?;
    /// ```
    pub async fn child<W>(&self, name: &str, input: W::Input) -> Result<W::Output, WorkflowError>
    where
        W: Workflow,
        W::Input: Serialize,
        W::Output: DeserializeOwned,
    {
        // The child's output is recorded at the version of its type the child's code declared
        // (kept with the child's output) and upgraded to `W`'s declaration here before the code
        // sees it, as any recorded value is.
        let o = self
            .exclusive(name)
            .await
            .child_call(name, ChildSpec::of::<W>(input), true, Reader::output_of::<W>())
            .await;
        decode_outcome(EntryKind::Child.as_str(), name, o)
    }

    /// [`Ctx::child`] by workflow name, version and options. The output is read as the child
    /// recorded it: this build may not link the child's code, so it cannot know its output's
    /// type versions (a shape the code cannot read blocks the run as undecodable). Use
    /// [`Ctx::child`] for a child whose output's type is versioned.
    pub async fn child_with<T: DeserializeOwned>(&self, name: &str, spec: ChildSpec) -> Result<T, WorkflowError> {
        let o = self
            .exclusive(name)
            .await
            .child_call(name, spec, true, Reader::as_is())
            .await;
        decode_outcome(EntryKind::Child.as_str(), name, o)
    }

    /// Starts a run of `W` as this run's child and goes on without waiting: returns its
    /// thread id (journaled). Cancelling this run still cancels it, unless its spec says
    /// otherwise ([`Ctx::start_child_with`]).
    pub async fn start_child<W>(&self, name: &str, input: W::Input) -> Result<ThreadId, WorkflowError>
    where
        W: Workflow,
        W::Input: Serialize,
    {
        self.start_child_with(name, ChildSpec::of::<W>(input)).await
    }

    /// [`Ctx::start_child`] by workflow name, version and options.
    pub async fn start_child_with(&self, name: &str, spec: ChildSpec) -> Result<ThreadId, WorkflowError> {
        let o = self
            .exclusive(name)
            .await
            .child_call(name, spec, false, Reader::as_is())
            .await;
        let v: Value = decode_outcome(EntryKind::Child.as_str(), name, o)?;
        let t = v["thread_id"].as_str().unwrap_or_default();
        ThreadId::new(t).map_err(|e| WorkflowError::Decode {
            name: name.to_owned(),
            message: e.to_string(),
        })
    }
}

impl Core {
    /// Starts or awaits a child run (what [`Ctx::child_with`] and [`Ctx::start_child_with`] do).
    /// `reader`: how the child's output type is versioned here.
    pub(super) async fn child_call(&mut self, name: &str, spec: ChildSpec, awaited: bool, reader: Reader) -> Outcome {
        if let Some(o) = self.replayed_child(name, reader).await {
            return o;
        }
        self.before_live(name).await;
        // Outside the run: every entry before the child's start is durable first.
        self.barrier().await;
        let index = self.cursor;
        let parent = self.p.lease.thread.clone();
        let child = spec
            .thread_id
            .clone()
            .unwrap_or_else(|| child_thread_id(&parent, index));
        let input = match &spec.input {
            Ok(v) => v.to_string(),
            Err(e) => {
                let o = Outcome::Err(format!("the child's input does not encode as JSON: {e}"));
                return self.record_child(name, &child, o, ("", None)).await;
            }
        };
        self.failpoint("child.before_start").await;
        let detail = format!("{index} {name} {}@{} {child}", spec.workflow, spec.version);
        let link = self
            .p
            .store
            .child_link(&self.p.lease, index, &child, spec.on_parent_cancel, &detail)
            .await;
        if let Err(e) = link {
            return self.store_failed(e).await;
        }
        self.failpoint("child.after_link").await;
        let queue = spec
            .queue
            .clone()
            .or_else(|| self.p.routing.as_ref().map(|r| r.home.clone()));
        let opts = CreateOptions {
            timeout: spec.timeout,
            parent: Some(ParentLink {
                thread: parent.clone(),
                index,
            }),
            queue: queue.clone(),
            flow: None,
            priority: 0,
            input_version: spec.input_version,
            input_type: spec.input_type.map(str::to_owned),
        };
        let trace = (self.p.traceparent)().unwrap_or_default();
        let created = self
            .p
            .store
            .create_with(&child, &spec.workflow, spec.version, &input, &trace, &opts)
            .await;
        let fresh = match created {
            Ok(CreateOutcome::Created) => {
                if let Some(tasks) = self.p.tasks.clone() {
                    tasks.start(child.clone(), queue).await;
                }
                true
            }
            // Started before this run crashed (the same workflow and input): it is the one.
            Ok(CreateOutcome::Exists(_)) => false,
            Ok(CreateOutcome::Conflict(wf)) => {
                let o = Outcome::Err(format!(
                    "child thread id {child} is taken by another run (workflow {wf:?}, another input)"
                ));
                return self.record_child(name, &child, o, ("child_returned", None)).await;
            }
            Err(e) => return self.store_failed(e).await,
        };
        self.failpoint("child.after_start").await;
        if !awaited {
            let o = Outcome::Ok(json!({ "thread_id": child }));
            return self.record_child(name, &child, o, ("", None)).await;
        }
        self.await_child(name, (index, &child), &spec.workflow, fresh, reader)
            .await
    }

    /// The recorded outcome of the child call `name`, its value upgraded to this code's version
    /// of its type, if the journal has it.
    async fn replayed_child(&mut self, name: &str, reader: Reader) -> Option<Outcome> {
        let e = self.replayed(name, EntryKind::Child).await?;
        Some(match e.outcome {
            Outcome::Ok(v) => Outcome::Ok(self.upgraded(reader, (EntryKind::Child, name), e.tv, v).await),
            err => err,
        })
    }

    /// Journals the outcome of the child call at the cursor (key = the child's thread id),
    /// with the event and the version of its value's type.
    async fn record_child(
        &mut self,
        name: &str,
        child: &ThreadId,
        o: Outcome,
        (event, tv): (&str, Option<u32>),
    ) -> Outcome {
        let entry = Entry {
            key: Some(child.to_string()),
            ..Entry::new(name, EntryKind::Child, o.clone(), 1).with_value_version(tv)
        };
        // The child's word for this call, whether or not this slice saw it arrive: a word
        // that came after the claim is its one field (signal.lua), dropped with the entry.
        let field = self
            .take_child_word(self.cursor)
            .unwrap_or_else(|| format!("s:{}:0", child_signal(self.cursor)));
        self.commit(entry, event, Some(&field)).await;
        o
    }

    /// The child's word to this run for the call at `index`, if it arrived: (field, value).
    fn child_word(&self, index: u32) -> Option<(String, Value)> {
        self.buffered(&format!("s:{}:", child_signal(index)))
    }

    /// Takes the child's word for the call at `index` out of the buffered signals, so the
    /// commit consumes it with the entry.
    fn take_child_word(&mut self, index: u32) -> Option<String> {
        let (f, _) = self.child_word(index)?;
        self.p.signals.remove(&f);
        Some(f)
    }

    /// Records the child's outcome if it ended, else waits for it. `fresh`: this slice just
    /// created it, so it has not ended and its record need not be read.
    async fn await_child(
        &mut self,
        name: &str,
        (index, child): (u32, &ThreadId),
        workflow: &str,
        fresh: bool,
        reader: Reader,
    ) -> Outcome {
        let told = self.child_word(index).and_then(|(_, v)| ChildResult::from_value(&v));
        let result = match told {
            Some(r) => Some(r),
            None if fresh => None,
            // No word (not ended yet, or the word was lost): the child's own record decides.
            None => match self.p.store.header(child).await {
                Ok(Some(h)) => ChildResult::of(&h),
                Ok(None) => Some(ChildResult::Failed(
                    "the child run does not exist (it expired or was purged)".into(),
                )),
                Err(e) => return self.store_failed(e).await,
            },
        };
        if let Some(r) = result {
            // Journaled as the child wrote it (at its output's version), then read as a replay
            // reads it: upgraded to this code's version of the type.
            let (o, ov) = match r {
                ChildResult::Completed(v, ov) => (Outcome::Ok(v), ov),
                ChildResult::Failed(e) => (Outcome::Err(format!("child run {child} failed: {e}")), None),
                ChildResult::Cancelled(e) => (Outcome::Err(format!("child run {child} was cancelled: {e}")), None),
            };
            // A completed child's output without a version was written by an older build: its
            // version is not known (§8c), so it is never taken as 1 where this code reads a
            // later one.
            let ov = match ov {
                None if matches!(o, Outcome::Ok(_)) => match self.unrecorded_output(reader, (index, child)).await {
                    Ok(ov) => ov,
                    Err(blocked) => return blocked,
                },
                ov => ov,
            };
            let tv = match &ov {
                None => None,
                Some(ov) if ov.is_first() => None,
                Some(ov) => match self.take_recorded(reader, ov).await {
                    Recorded::At(tv) => tv,
                    Recorded::GiveBack => return self.give_back(ov, &format!("the output of child run {child}")).await,
                },
            };
            return match self.record_child(name, child, o, ("child_returned", tv)).await {
                Outcome::Ok(v) => Outcome::Ok(self.upgraded(reader, (EntryKind::Child, name), tv, v).await),
                err => err,
            };
        }
        let wait = Wait {
            kind: "child".into(),
            name: child_signal(index),
            payload: json!({"thread_id": child, "workflow": workflow, "call": name}),
        };
        let how = Suspend {
            due_in: Some(self.p.store.timings().child_poll),
            ..Suspend::waiting(&wait)
        };
        let r = self
            .suspend_run(None, how, ("waiting_child", &format!("{index} {child}")))
            .await;
        match r {
            Ok(s) => self.stop(SliceExit::Suspended { woke: s.woke, rv: s.rv }).await,
            Err(e) => self.store_failed(e).await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_child_thread_id_is_derived_from_the_parent_and_the_index() {
        let p = ThreadId::new("invoice-42").unwrap();
        assert_eq!(child_thread_id(&p, 3).as_str(), "invoice-42.c3");
        assert_eq!(child_thread_id(&p, 3), child_thread_id(&p, 3));
        let long = ThreadId::new("x".repeat(MAX_THREAD_ID_LEN)).unwrap();
        let c = child_thread_id(&long, 7);
        assert!(c.as_str().starts_with("child-") && c.as_str().ends_with(".c7"), "{c}");
        assert_ne!(
            c,
            child_thread_id(&ThreadId::new("y".repeat(MAX_THREAD_ID_LEN)).unwrap(), 7)
        );
    }

    #[test]
    fn a_childs_word_round_trips() {
        for r in [
            ChildResult::Completed(json!({"n": 1}), None),
            ChildResult::Completed(
                json!({"n": 2}),
                Some(savepoint_core::model::OutputVersion {
                    type_name: "a::Price".into(),
                    version: 3,
                }),
            ),
            // Version 1 of a type the child's code does not declare: recorded as such, so
            // it is told apart from a word with no version (an older build's).
            ChildResult::Completed(
                json!({"n": 3}),
                Some(savepoint_core::model::OutputVersion {
                    type_name: String::new(),
                    version: 1,
                }),
            ),
            ChildResult::Failed("boom".into()),
            ChildResult::Cancelled("operator".into()),
        ] {
            assert_eq!(ChildResult::from_value(&r.to_value()), Some(r));
        }
        assert_eq!(ChildResult::from_value(&json!({"status": "odd"})), None);
    }
}
