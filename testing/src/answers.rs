//! [`Answers`]: what a test answers a run's human waits with, so the kit (and a
//! [`crate::CrashMatrix`]) can drive a run through its interrupts and signals to the end.

use serde::Serialize;
use serde_json::Value;
use std::collections::VecDeque;

use savepoint::workflow::{Interrupt, Signal};
use savepoint_core::ids::ThreadId;
use savepoint_store::RunStatus;

use crate::{Settled, TestEnv, TestError};

/// The kind of wait an answer is for, as a waiting run's header names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum WaitKind {
    Interrupt,
    Signal,
}

impl WaitKind {
    fn parse(kind: &str) -> Option<Self> {
        match kind {
            "interrupt" => Some(Self::Interrupt),
            "signal" => Some(Self::Signal),
            _ => None,
        }
    }
}

#[derive(Debug, Clone)]
struct Answer {
    kind: WaitKind,
    name: String,
    /// The JSON value, or why the test's value does not encode.
    value: Result<Value, String>,
}

/// Scripted answers to a run's human waits: for interrupt `X` answer `V`, for signal `S`
/// send `V`. When the run waits for an interrupt or a signal, the kit takes the first unused
/// answer given for that name and delivers it as [`TestEnv::resume`] or [`TestEnv::signal`]
/// would; each answer is used once, so a run that waits for the same name twice needs two.
/// A wait with no answer left ends the drive with the run waiting.
///
/// ```ignore
/// const APPROVAL: Interrupt<ShippingApproval> = Interrupt::new("shipping_approval");
/// let answers = Answers::new()
///     .interrupt(APPROVAL, &ShippingApproval { approved: true, carrier: "DHL".into() })
///     .signal("pause", &false);                    // a name works too (the type inferred)
/// ```
#[derive(Debug, Clone, Default)]
pub struct Answers {
    queue: VecDeque<Answer>,
}

impl Answers {
    /// No answers: a drive stops at the first wait.
    pub fn new() -> Self {
        Self::default()
    }

    /// Answers interrupt `handle` (a typed handle, or its name) with `answer`.
    pub fn interrupt<T: Serialize>(self, handle: impl Into<Interrupt<T>>, answer: &T) -> Self {
        let name = handle.into().name().to_owned();
        self.push(WaitKind::Interrupt, name, answer)
    }

    /// Sends signal `handle` (a typed handle, or its name) with `value` when the run waits
    /// for it.
    pub fn signal<T: Serialize>(self, handle: impl Into<Signal<T>>, value: &T) -> Self {
        let name = handle.into().name().to_owned();
        self.push(WaitKind::Signal, name, value)
    }

    fn push<T: Serialize>(mut self, kind: WaitKind, name: String, value: &T) -> Self {
        let value = serde_json::to_value(value).map_err(|e| format!("the answer to {name:?} does not encode: {e}"));
        self.queue.push_back(Answer { kind, name, value });
        self
    }

    /// How many answers are left unused.
    pub fn len(&self) -> usize {
        self.queue.len()
    }

    /// True when no answer is left.
    pub fn is_empty(&self) -> bool {
        self.queue.is_empty()
    }

    /// Takes the first answer for this wait, if any.
    fn take(&mut self, kind: WaitKind, name: &str) -> Option<Answer> {
        let at = self.queue.iter().position(|a| a.kind == kind && a.name == name)?;
        self.queue.remove(at)
    }
}

/// How a scripted drive went.
pub(crate) struct Driven {
    /// Where the run stopped.
    pub(crate) settled: Settled,
    /// Answers delivered.
    pub(crate) answered: usize,
    /// Answers delivered before an injected crash was first seen (`None`: no crash).
    pub(crate) answered_before_crash: Option<usize>,
}

impl TestEnv {
    /// [`TestEnv::settle`], answering each interrupt or signal the run waits for from
    /// `answers` (used up as they are delivered) and settling again, until the run is
    /// completed, failed, cancelled or blocked, or waits for something `answers` has no
    /// answer for (then it is returned waiting).
    pub async fn settle_answering(&mut self, thread: &ThreadId, answers: &mut Answers) -> Result<Settled, TestError> {
        Ok(self.drive_answering(thread, answers).await?.settled)
    }

    pub(crate) async fn drive_answering(
        &mut self,
        thread: &ThreadId,
        answers: &mut Answers,
    ) -> Result<Driven, TestError> {
        let (mut answered, mut before_crash) = (0, None);
        loop {
            let settled = self.settle(thread).await?;
            if before_crash.is_none() && self.crashes() > 0 {
                before_crash = Some(answered);
            }
            let wait = match (&settled.header.status, &settled.header.wait) {
                (RunStatus::Waiting, Some(w)) => WaitKind::parse(&w.kind).map(|k| (k, w.name.clone())),
                _ => None,
            };
            let Some(answer) = wait.and_then(|(kind, name)| answers.take(kind, &name)) else {
                return Ok(Driven {
                    settled,
                    answered,
                    answered_before_crash: before_crash,
                });
            };
            let value = answer.value.map_err(TestError::Input)?;
            match answer.kind {
                WaitKind::Interrupt => self.resume(thread, value).await?,
                WaitKind::Signal => self.signal(thread, &answer.name, value).await?,
            }
            answered += 1;
        }
    }
}
