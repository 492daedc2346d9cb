//! The worker's own view of its lease: a local deadline on the monotonic clock.
//!
//! Redis decides who holds a run (the fence), but a worker cannot ask Redis before every
//! instruction. It keeps a local deadline instead: when Redis confirms a request that
//! extends the lease (claim, commit, heartbeat, effect begin), the lease is valid until at
//! least `sent + lease` on the server, because the server stamped it after the request was
//! sent. The worker acts only until `sent + lease - margin`, measured on its own monotonic
//! clock, so it stops before any other worker can take the run over (takeover needs the
//! server's clock past the lease, plus the grace). The margin absorbs clock-rate
//! differences; a server clock that jumps forward is not covered (see the README, "Leases and
//! time").
//!
//! Past the deadline a worker starts no live call and drops the call in flight. What the
//! deadline cannot cover is a process that stalls *between* its check and the bytes leaving
//! the socket; that is what the fencing token handed to effects is for.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
// The runtime's clock: real time in production, virtual time under a paused test runtime.
use tokio::time::Instant;

#[derive(Debug)]
struct State {
    deadline: Instant,
    /// The local deadline of the flow-control slot the slice holds, if any.
    slot: Option<Instant>,
    stalled_until: Option<Instant>,
}

/// A lease's local deadline, shared by a slice and its heartbeat. Cheap to clone.
#[derive(Debug, Clone)]
pub struct LeaseClock {
    validity: Duration,
    state: Arc<Mutex<State>>,
}

impl LeaseClock {
    /// A clock for a lease of `lease` that Redis confirmed for a request sent at `sent`;
    /// the worker acts until `sent + lease - margin`.
    pub fn new(sent: Instant, lease: Duration, margin: Duration) -> Self {
        let validity = lease.saturating_sub(margin);
        Self {
            validity,
            state: Arc::new(Mutex::new(State {
                deadline: sent + validity,
                slot: None,
                stalled_until: None,
            })),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A poisoned lock only means a panic elsewhere while holding it; the data is two
        // instants and stays valid.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Redis confirmed a lease-extending request sent at `sent`: the deadline moves to
    /// `sent + lease - margin` (never backwards).
    pub fn confirmed(&self, sent: Instant) {
        let mut s = self.lock();
        let d = sent + self.validity;
        if d > s.deadline {
            s.deadline = d;
        }
    }

    /// The slice also holds a flow-control slot, taken (or last extended) by a request sent
    /// at `sent` with the lease's validity: from now on the deadline is also bounded by the
    /// slot's, which only [`LeaseClock::slot_confirmed`] moves (a commit extends the lease,
    /// not the slot, so a step never runs on past the slot when its extensions fail).
    pub fn bind_slot(&self, sent: Instant) {
        self.lock().slot = Some(sent + self.validity);
    }

    /// Redis confirmed a slot extension sent at `sent` (never backwards; nothing without a
    /// bound slot).
    pub fn slot_confirmed(&self, sent: Instant) {
        let mut s = self.lock();
        let d = sent + self.validity;
        if let Some(slot) = s.slot.as_mut().filter(|slot| d > **slot) {
            *slot = d;
        }
    }

    /// The instant after which this worker must not act under the lease (or its slot).
    pub fn deadline(&self) -> Instant {
        let s = self.lock();
        s.slot.map_or(s.deadline, |slot| slot.min(s.deadline))
    }

    /// True once the deadline has passed.
    pub fn expired(&self) -> bool {
        Instant::now() >= self.deadline()
    }

    /// Time left before the deadline (zero once it passed).
    pub fn remaining(&self) -> Duration {
        self.deadline().saturating_duration_since(Instant::now())
    }

    /// Simulates a stalled process for `d` (failpoint `pause`): heartbeats are not sent
    /// while stalled, so the lease can run out under the paused slice as it would under a
    /// GC pause or a frozen VM.
    pub fn stall(&self, d: Duration) {
        self.lock().stalled_until = Some(Instant::now() + d);
    }

    /// True while a simulated stall lasts.
    pub fn stalled(&self) -> bool {
        self.lock().stalled_until.is_some_and(|t| Instant::now() < t)
    }
}

/// The server's clock as a worker knows it between two readings: the one a request's reply
/// carried, bracketed by when that request was sent and when its reply came. The server read
/// its clock in between, so the clock now lies within [`ServerClock::earliest`] and
/// [`ServerClock::latest`], however late the reply came or whatever the worker did since.
/// A run's deadline is checked against both: no call starts once the latest reading may have
/// passed it, and no run is failed for it before the earliest reading has.
#[derive(Debug, Clone, Copy)]
pub struct ServerClock {
    read_ms: u64,
    sent: Instant,
    received: Instant,
}

impl ServerClock {
    /// The server read `read_ms` while answering a request sent at `sent`, whose reply came
    /// at `received`.
    pub fn new(read_ms: u64, sent: Instant, received: Instant) -> Self {
        Self {
            read_ms,
            sent,
            received,
        }
    }

    /// A reading taken here and now (a replay, which runs nothing live).
    pub fn fixed(read_ms: u64) -> Self {
        let now = Instant::now();
        Self::new(read_ms, now, now)
    }

    /// The latest the server's clock can read now (ms): never behind it. The reading is
    /// rounded down to the millisecond, so one is added, and the time since `sent` rounded up.
    pub fn latest(&self) -> u64 {
        let since = self.sent.elapsed();
        let ms = since.as_millis() as u64 + u64::from(!since.subsec_nanos().is_multiple_of(1_000_000));
        self.read_ms + 1 + ms
    }

    /// The earliest the server's clock can read now (ms): never ahead of it.
    pub fn earliest(&self) -> u64 {
        self.read_ms + self.received.elapsed().as_millis() as u64
    }

    /// The reading the request's reply carried (ms).
    pub fn read_ms(&self) -> u64 {
        self.read_ms
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn the_server_clock_is_bracketed_by_the_send_and_the_reply() {
        let sent = Instant::now();
        tokio::time::advance(Duration::from_millis(300)).await; // request in flight, then a slow reply
        let c = ServerClock::new(10_000, sent, Instant::now());
        assert_eq!((c.earliest(), c.latest()), (10_000, 10_301));
        tokio::time::advance(Duration::from_micros(2_500)).await; // a stall after the reply
        assert_eq!((c.earliest(), c.latest()), (10_002, 10_304));
        let f = ServerClock::fixed(5);
        assert_eq!((f.earliest(), f.latest()), (5, 6));
    }

    #[test]
    fn a_bound_slot_bounds_the_deadline_until_it_is_extended() {
        let t0 = Instant::now();
        let c = LeaseClock::new(t0, Duration::from_millis(1000), Duration::from_millis(100));
        c.bind_slot(t0);
        // A commit moves the lease, not the slot.
        c.confirmed(t0 + Duration::from_millis(500));
        assert_eq!(c.deadline(), t0 + Duration::from_millis(900));
        c.slot_confirmed(t0 + Duration::from_millis(300));
        assert_eq!(c.deadline(), t0 + Duration::from_millis(1200));
        c.slot_confirmed(t0 + Duration::from_millis(800));
        assert_eq!(c.deadline(), t0 + Duration::from_millis(1400));
        // Never backwards.
        c.slot_confirmed(t0);
        assert_eq!(c.deadline(), t0 + Duration::from_millis(1400));
    }

    #[test]
    fn deadline_is_sent_plus_lease_minus_margin_and_never_moves_back() {
        let t0 = Instant::now();
        let c = LeaseClock::new(t0, Duration::from_millis(3000), Duration::from_millis(500));
        assert_eq!(c.deadline(), t0 + Duration::from_millis(2500));
        c.confirmed(t0 + Duration::from_millis(1000));
        assert_eq!(c.deadline(), t0 + Duration::from_millis(3500));
        // A late reply to an older request does not shorten it.
        c.confirmed(t0 + Duration::from_millis(200));
        assert_eq!(c.deadline(), t0 + Duration::from_millis(3500));
        assert!(!c.expired());
        let gone = LeaseClock::new(
            Instant::now() - Duration::from_secs(10),
            Duration::from_secs(3),
            Duration::ZERO,
        );
        assert!(gone.expired());
        assert_eq!(gone.remaining(), Duration::ZERO);
    }

    #[test]
    fn stall_is_temporary() {
        let c = LeaseClock::new(Instant::now(), Duration::from_secs(3), Duration::ZERO);
        assert!(!c.stalled());
        c.stall(Duration::from_secs(60));
        assert!(c.stalled());
        c.stall(Duration::ZERO);
        assert!(!c.stalled());
    }
}
