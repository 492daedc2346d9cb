use rand::rngs::StdRng;
use rand::Rng;
use savepoint_core::mem::{Fault, Faults, Op};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The trace: timestamped lines, hashed as they come.
#[derive(Default)]
pub(super) struct Trace {
    pub(super) lines: Mutex<Vec<String>>,
    pub(super) stats: Mutex<BTreeMap<String, u64>>,
}

impl Trace {
    pub(super) fn line(&self, at_ms: u64, s: String) {
        if let Ok(mut l) = self.lines.lock() {
            l.push(format!("[{at_ms:>7}ms] {s}"));
        }
    }

    pub(super) fn count(&self, what: &str) {
        self.count_by(what, 1);
    }

    pub(super) fn count_by(&self, what: &str, n: u64) {
        if let Ok(mut s) = self.stats.lock() {
            *s.entry(what.to_owned()).or_default() += n;
        }
    }
}

/// The fault plan: seeded draws, only while `on`.
pub(super) struct Plan {
    pub(super) rng: Mutex<StdRng>,
    pub(super) on: AtomicBool,
    pub(super) trace: Arc<Trace>,
    pub(super) clock: tokio::time::Instant,
    pub(super) lease_ms: u64,
    /// When the last stall injected so far ends (ms on `clock`): a store operation stalled
    /// before the heal lands after it (a scheduler's decision, say), so the heal waits for it.
    pub(super) stalled_until: AtomicU64,
    /// The driver's jumps of the clock (ms; see `World::jump`).
    pub(super) jumped: Arc<AtomicU64>,
}

impl Plan {
    pub(super) fn draw(&self) -> f64 {
        self.rng.lock().map(|mut r| r.random::<f64>()).unwrap_or(1.0)
    }

    pub(super) fn now(&self) -> u64 {
        (self.clock.elapsed().as_millis() as u64).saturating_sub(self.jumped.load(Ordering::Acquire))
    }
}

impl Faults for Plan {
    fn decide(&self, op: Op<'_>) -> Fault {
        if !self.on.load(Ordering::Acquire) {
            return Fault::Pass;
        }
        let x = self.draw();
        let (fault, what) = match op {
            Op::Script(_) | Op::Command(_) => {
                if x < 0.02 {
                    (Fault::Fail, "store.fail")
                } else if x < 0.04 {
                    (Fault::LoseReply, "store.lost_reply")
                } else if x < 0.05 {
                    let ms = (self.draw() * 3.0 * self.lease_ms as f64) as u64;
                    (Fault::Delay(Duration::from_millis(ms)), "store.stall")
                } else {
                    (Fault::Pass, "")
                }
            }
            Op::Publish => {
                if x < 0.03 {
                    (Fault::Fail, "publish.fail")
                } else if x < 0.06 {
                    (Fault::Duplicate, "publish.duplicate")
                } else if x < 0.09 {
                    let ms = (self.draw() * 2000.0) as u64;
                    (Fault::Delay(Duration::from_millis(ms)), "publish.delay")
                } else {
                    (Fault::Pass, "")
                }
            }
            Op::Settle => {
                if x < 0.03 {
                    (Fault::Fail, "settle.fail")
                } else {
                    (Fault::Pass, "")
                }
            }
            // Half the tasks go to another worker than the first to ask (a run's slices move
            // between workers: invariant 17's stale parked bodies). Counted, not traced.
            Op::Take => {
                if x < 0.5 {
                    self.trace.count("broker.passed_on");
                    return Fault::Fail;
                }
                return Fault::Pass;
            }
        };
        if let Fault::Delay(d) = fault {
            self.stalled_until
                .fetch_max(self.now() + d.as_millis() as u64, Ordering::AcqRel);
        }
        if fault != Fault::Pass {
            self.trace.count(what);
            let name = match op {
                Op::Script(s) | Op::Command(s) => s,
                Op::Publish => "publish",
                Op::Settle => "settle",
                Op::Take => "take",
            };
            self.trace
                .line(self.now(), format!("fault {what} on {name}: {fault:?}"));
        }
        fault
    }
}
