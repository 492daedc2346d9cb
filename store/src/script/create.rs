//! Starting a run.

use super::{ms, ScriptStore};
use crate::model::{needs_field, CreateOptions, RunStatus};
use crate::{CreateOutcome, StoreError};
use savepoint_core::ids::ThreadId;

/// Checkpoint schema version written by this build.
pub const SCHEMA_VERSION: u32 = 1;

impl ScriptStore {
    /// Starts a run (idempotent on thread id + workflow + input).
    pub async fn create(
        &self,
        thread: &ThreadId,
        workflow: &str,
        workflow_version: u32,
        input: &str,
        trace: &str,
    ) -> Result<CreateOutcome, StoreError> {
        self.create_with(
            thread,
            workflow,
            workflow_version,
            input,
            trace,
            &CreateOptions::default(),
        )
        .await
    }

    /// [`ScriptStore::create`] with options (a run timeout). The options of an existing run are
    /// not compared: a repeated start answers with the run as it is.
    #[tracing::instrument(level = "debug", name = "create", skip_all, fields(thread.id = %thread))]
    pub async fn create_with(
        &self,
        thread: &ThreadId,
        workflow: &str,
        workflow_version: u32,
        input: &str,
        trace: &str,
        opts: &CreateOptions,
    ) -> Result<CreateOutcome, StoreError> {
        let k = self.keys.run(thread);
        let mut inv = self.scripts.create.prepare_invoke();
        inv.key(&k.run)
            .key(&k.due)
            .key(&k.events)
            .key(&k.index)
            .key(&k.unconfirmed);
        inv.arg(thread.as_str())
            .arg(workflow)
            .arg(workflow_version)
            .arg(SCHEMA_VERSION);
        inv.arg(self.seal_run(thread, "input", input).as_ref())
            .arg(ms(self.cfg.redeliver))
            .arg(self.cfg.event_cap)
            .arg(trace)
            .arg(ms(self.cfg.retention))
            .arg(ms(self.cfg.queued_redeliver))
            .arg(opts.timeout.map(|d| ms(d).to_string()).unwrap_or_default());
        match &opts.parent {
            Some(p) => inv.arg(p.thread.as_str()).arg(p.index),
            None => inv.arg("").arg(""),
        };
        inv.arg(opts.queue.as_deref().unwrap_or(""));
        // (The flow key may be an input's value: sealed in the run like one.)
        match &opts.flow {
            Some(f) => inv
                .arg(self.seal_run(thread, "fck", &f.key).as_ref())
                .arg(f.limit)
                .arg(f.rate.map(|r| r.to_string()).unwrap_or_default()),
            None => inv.arg("").arg("").arg(""),
        };
        inv.arg(opts.priority)
            .arg(needs_field(opts.needs().iter().map(String::as_str)));
        inv.arg(
            opts.input_version
                .filter(|v| *v > 1)
                .map(|v| v.to_string())
                .unwrap_or_default(),
        );
        let r = self.invoke(&inv).await?;
        match r.tag().as_str() {
            "created" => Ok(CreateOutcome::Created),
            "exists" => Ok(CreateOutcome::Exists(
                RunStatus::parse(&r.text(1)).unwrap_or(RunStatus::Pending),
            )),
            // Sealed inputs differ byte for byte (random nonces): the same input is found by
            // opening the stored one.
            "conflict" if self.cfg.codec.is_some() && r.text(1) == workflow => match self.header(thread).await? {
                Some(h) if serde_json::from_str::<serde_json::Value>(input).ok().as_ref() == Some(&h.input) => {
                    Ok(CreateOutcome::Exists(h.status))
                }
                _ => Ok(CreateOutcome::Conflict(r.text(1))),
            },
            "conflict" => Ok(CreateOutcome::Conflict(r.text(1))),
            other => Err(StoreError::Reply(format!("create: {other}"))),
        }
    }
}
