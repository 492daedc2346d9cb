//! The embedded backend's shared vocabulary: the `mem://NAME` URLs that select it, and the
//! fault plans consulted before each operation of an embedded store engine or task queue
//! (the simulator and the test kit inject failures, lost replies, delays and duplicates
//! through them).

use std::sync::{Arc, RwLock};
use std::time::Duration;

/// The URL scheme that selects the embedded backend (`mem://NAME`).
pub const SCHEME: &str = "mem://";

/// The instance name of an embedded URL, if `url` is one.
pub fn instance_name(url: &str) -> Option<&str> {
    url.strip_prefix(SCHEME).map(|n| n.trim_end_matches('/'))
}

/// What an operation on the embedded backend is, for a fault plan.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op<'a> {
    /// A store script, by name (`claim`, `commit`, …).
    Script(&'a str),
    /// A plain store command, by verb (`HGETALL`, …).
    Command(&'a str),
    /// A broker publish (task or dead letter).
    Publish,
    /// A broker settlement (ack, requeue, dead letter of a delivery).
    Settle,
    /// A consumer about to take the next ready message: [`Fault::Fail`] passes it to another
    /// consumer (it waits a moment first), as a broker hands a queue's messages to whichever
    /// of its consumers it likes.
    Take,
}

/// What happens to one operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Carried out normally.
    Pass,
    /// Not carried out; the caller sees a transient error (connection refused, timeout).
    Fail,
    /// Carried out, then the reply is lost: the caller sees a transient error.
    LoseReply,
    /// Carried out after this delay (the reply arrives late; a delayed publish lands after
    /// later ones: reordered).
    Delay(Duration),
    /// (Publish) stored twice, as a retried publish whose first confirm was lost.
    Duplicate,
}

/// A fault plan consulted before every operation of an instance.
pub trait Faults: Send + Sync {
    /// The fault for this operation.
    fn decide(&self, op: Op<'_>) -> Fault;
}

/// Where an instance keeps its fault plan (none: every operation passes).
#[derive(Default)]
pub struct FaultSlot(RwLock<Option<Arc<dyn Faults>>>);

impl FaultSlot {
    pub fn set(&self, faults: Option<Arc<dyn Faults>>) {
        if let Ok(mut f) = self.0.write() {
            *f = faults;
        }
    }

    pub fn decide(&self, op: Op<'_>) -> Fault {
        match self.0.read() {
            Ok(f) => f.as_ref().map_or(Fault::Pass, |f| f.decide(op)),
            Err(_) => Fault::Pass,
        }
    }
}
