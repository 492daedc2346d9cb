//! Renewing a task the broker has counted often without any worker failing on it.
//!
//! A quorum queue counts every return of a message towards its delivery limit, and RabbitMQ
//! before 4.3 counts the returns of a closed channel too: everything pushed to a worker and
//! not yet taken comes back counted when that worker dies. A worker acknowledges a task as
//! soon as it has claimed the run, so what comes back is, almost always, a task that nobody
//! started; a worker crashing in a loop would have its held tasks dead-lettered as poison
//! after 20 crashes, and their runs would wait for the scanner's safety net. A run that does
//! crash its workers is stopped by the run's own count (`max_crashes`, at the claim), not by
//! the broker's. So a consumer of a task queue that receives a delivery counted
//! [`due`]'s threshold times publishes it again as a new message (confirmed, then
//! acknowledges the old one; a crash between the two leaves two tasks for one run, which the
//! claim's fence makes harmless) and carries the number of renewals in
//! [`RENEWALS_HEADER`]. After [`MAX_RENEWALS`] it is handed out as it is, so a message that
//! kills its worker before the claim still reaches the dead-letter queue, after
//! `delivery_limit × (MAX_RENEWALS + 2) / 2` deliveries.

use std::collections::BTreeMap;

/// Header counting a task's renewals.
pub const RENEWALS_HEADER: &str = "x-savepoint-renewals";

/// Renewals of one task at most.
pub const MAX_RENEWALS: u32 = 4;

/// The renewal number to give a delivery the broker counted `count` times and that was
/// renewed `renewals` times, under a queue's `delivery_limit` (0: none); `None`: hand it out.
pub(crate) fn due(count: u32, renewals: u32, delivery_limit: u32) -> Option<u32> {
    (delivery_limit > 0 && count >= (delivery_limit / 2).max(1) && renewals < MAX_RENEWALS).then_some(renewals + 1)
}

/// The renewals a message's headers record (0 without the header).
pub(crate) fn renewals(headers: &BTreeMap<String, String>) -> u32 {
    headers.get(RENEWALS_HEADER).and_then(|v| v.parse().ok()).unwrap_or(0)
}

/// Counts a renewal in the metrics.
pub(crate) fn counted() {
    savepoint_core::metrics::inc(&savepoint_core::metrics::metrics().published, &[("reason", "renew")]);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_task_is_renewed_at_half_the_limit_and_at_most_four_times() {
        assert_eq!(due(9, 0, 20), None);
        assert_eq!(due(10, 0, 20), Some(1));
        assert_eq!(due(19, 3, 20), Some(4));
        assert_eq!(due(10, 4, 20), None, "past MAX_RENEWALS the limit acts");
        assert_eq!(due(100, 0, 0), None, "no limit, nothing to renew");
        assert_eq!(due(1, 0, 1), Some(1));
        let mut h = BTreeMap::new();
        assert_eq!(renewals(&h), 0);
        h.insert(RENEWALS_HEADER.into(), "3".into());
        assert_eq!(renewals(&h), 3);
    }
}
