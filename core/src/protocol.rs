//! The step-task message (ARCHITECTURE §7): a doorbell that tells a worker a run may have
//! work. Encoded as MessagePack; `v` names the wire version so old messages stay readable.

use serde::{Deserialize, Serialize};

use crate::ids::ThreadId;

/// Current task wire version.
pub const TASK_VERSION: u8 = 1;

/// Why a task was published (shown in logs and metrics).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TaskReason {
    /// A new run was started.
    Start,
    /// A worker yielded after its step/time budget and asks for the next slice.
    Continue,
    /// The due scanner found the run overdue (timer fired, retry, lost message, expired lease).
    Due,
    /// A signal or resume value arrived.
    Signal,
    /// An operator resolved or retried the run.
    Operator,
}

impl TaskReason {
    /// The wire / metric label name.
    pub fn as_str(self) -> &'static str {
        match self {
            TaskReason::Start => "start",
            TaskReason::Continue => "continue",
            TaskReason::Due => "due",
            TaskReason::Signal => "signal",
            TaskReason::Operator => "operator",
        }
    }
}

/// A step task: `{v, thread, partition, step, attempt, reason}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Task {
    /// Wire version ([`TASK_VERSION`]).
    pub v: u8,
    /// The run.
    pub thread: ThreadId,
    /// The run's partition (redundant with the thread; checked on decode).
    pub partition: u16,
    /// The journal length the publisher saw, or `None` when unknown (scanner).
    /// A task whose step is behind the journal is stale and dropped.
    pub step: Option<u32>,
    /// Delivery attempt as the publisher counts it.
    pub attempt: u32,
    /// Why it was published.
    pub reason: TaskReason,
}

/// A task that could not be decoded; the reason goes into the dead-letter header.
#[derive(Debug, thiserror::Error)]
pub enum TaskDecodeError {
    /// Not MessagePack of the expected shape.
    #[error("malformed task message: {0}")]
    Malformed(String),
    /// A version this build does not read.
    #[error("unsupported task version {0} (this build reads 1)")]
    Version(u8),
}

impl Task {
    /// A new v1 task.
    pub fn new(thread: ThreadId, partition: u16, step: Option<u32>, reason: TaskReason) -> Self {
        Self {
            v: TASK_VERSION,
            thread,
            partition,
            step,
            attempt: 1,
            reason,
        }
    }

    /// MessagePack with field names (self-describing, so new optional fields stay compatible).
    pub fn encode(&self) -> Vec<u8> {
        // Serializing plain owned data into a Vec cannot fail.
        rmp_serde::to_vec_named(self).unwrap_or_default()
    }

    /// Decodes and checks the version.
    pub fn decode(bytes: &[u8]) -> Result<Self, TaskDecodeError> {
        #[derive(Deserialize)]
        struct Probe {
            v: u8,
        }
        let probe: Probe = rmp_serde::from_slice(bytes).map_err(|e| TaskDecodeError::Malformed(e.to_string()))?;
        if probe.v != TASK_VERSION {
            return Err(TaskDecodeError::Version(probe.v));
        }
        rmp_serde::from_slice(bytes).map_err(|e| TaskDecodeError::Malformed(e.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Task {
        Task::new(ThreadId::new("t-1").unwrap(), 7, Some(3), TaskReason::Due)
    }

    /// Golden bytes of wire version 1: changing them breaks in-flight messages.
    #[test]
    fn golden_bytes_v1() {
        let bytes = sample().encode();
        let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(
            hex,
            "86a17601a6746872656164a3742d31a9706172746974696f6e07a473746570\
             03a7617474656d707401a6726561736f6ea3647565"
        );
        assert_eq!(Task::decode(&bytes).unwrap(), sample());
    }

    #[test]
    fn round_trips_many_shapes() {
        for step in [None, Some(0), Some(u32::MAX)] {
            for reason in [TaskReason::Start, TaskReason::Continue, TaskReason::Signal] {
                let mut t = sample();
                t.step = step;
                t.reason = reason;
                t.attempt = step.unwrap_or(9);
                assert_eq!(Task::decode(&t.encode()).unwrap(), t);
            }
        }
    }

    #[test]
    fn rejects_garbage_and_future_versions() {
        assert!(matches!(Task::decode(b"hello"), Err(TaskDecodeError::Malformed(_))));
        let mut t = sample();
        t.v = 9;
        let bytes = rmp_serde::to_vec_named(&t).unwrap();
        assert!(matches!(Task::decode(&bytes), Err(TaskDecodeError::Version(9))));
        // A bad thread id is a decode error, not a panic.
        let bad = rmp_serde::to_vec_named(&serde_json::json!({
            "v": 1, "thread": "no spaces allowed", "partition": 1, "step": null, "attempt": 1, "reason": "due"
        }))
        .unwrap();
        assert!(matches!(Task::decode(&bad), Err(TaskDecodeError::Malformed(_))));
    }
}
