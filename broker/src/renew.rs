//! Renewing a task the broker has counted often.
//!
//! A quorum queue counts every return of a message towards its delivery limit, and RabbitMQ
//! before 4.3 counts the returns of a closed channel too: everything pushed to a worker and
//! not yet taken comes back counted when that worker dies, and a task a worker requeues
//! (a claim that failed on a transient error: Redis away) is counted each time. A worker
//! acknowledges a task as soon as it has claimed the run, so what the broker counts is
//! returns, not failures of the task: a worker crashing in a loop, or a long Redis outage,
//! would have healthy tasks dead-lettered as poison, their runs waiting for the scanner's
//! safety net (`queued_redeliver_ms`, 5 min). A run that crashes its workers is stopped by
//! the run's own count (`max_crashes`, at the claim), not by the broker's; and a task is
//! decoded by the engine's own bounded decoder before the claim, so no task is known to kill
//! a worker before it. So a consumer of a task queue that receives a delivery counted [`due`]'s
//! threshold times publishes it again as a new message (confirmed, then acknowledges the old
//! one; a crash between the two leaves two tasks for one run, which the claim's fence makes
//! harmless), with the number of renewals in [`RENEWALS_HEADER`], and never lets the queue's
//! count reach the limit. Every [`LOUD_EVERY`]th renewal of a task is logged as a warning: a
//! task that keeps going round means a worker that keeps dying, or a store that is away.

use std::collections::BTreeMap;

/// Header counting a task's renewals.
pub const RENEWALS_HEADER: &str = "x-savepoint-renewals";

/// Every this many renewals of one task, a warning.
pub(crate) const LOUD_EVERY: u32 = 5;

/// The renewal number to give a delivery the broker counted `count` times and that was
/// renewed `renewals` times, under a queue's `delivery_limit` (0: none); `None`: hand it out.
pub(crate) fn due(count: u32, renewals: u32, delivery_limit: u32) -> Option<u32> {
    (delivery_limit > 0 && count >= (delivery_limit / 2).max(1)).then_some(renewals.saturating_add(1))
}

/// The renewals a message's headers record (0 without the header).
pub(crate) fn renewals(headers: &BTreeMap<String, String>) -> u32 {
    headers.get(RENEWALS_HEADER).and_then(|v| v.parse().ok()).unwrap_or(0)
}

/// Counts a renewal in the metrics (and says so loudly every [`LOUD_EVERY`]th of one task).
pub(crate) fn counted(renewal: u32) {
    savepoint_core::metrics::inc(&savepoint_core::metrics::metrics().published, &[("reason", "renew")]);
    if renewal.is_multiple_of(LOUD_EVERY) {
        tracing::warn!(
            renewal,
            "a task went back to its queue about {} times without a worker failing on it (a worker dying in a \
             loop with tasks pushed to it, or claims failing while the store is away): renewed so the queue's \
             delivery limit does not dead-letter it",
            u64::from(renewal) * 10
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_task_is_renewed_at_half_the_limit_however_often() {
        assert_eq!(due(9, 0, 20), None);
        assert_eq!(due(10, 0, 20), Some(1));
        assert_eq!(due(19, 3, 20), Some(4));
        assert_eq!(due(10, 400, 20), Some(401), "no cap: the run's own count guards poison");
        assert_eq!(due(100, 0, 0), None, "no limit, nothing to renew");
        assert_eq!(due(1, 0, 1), Some(1));
        let mut h = BTreeMap::new();
        assert_eq!(renewals(&h), 0);
        h.insert(RENEWALS_HEADER.into(), "3".into());
        assert_eq!(renewals(&h), 3);
    }
}
