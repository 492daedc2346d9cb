//! The deterministic simulator's seeded slice (the long runs are `savepoint sim --seeds N`).

use savepoint_cli::sim::{self, SimArgs};

/// 100 seeds here (about a minute of a debug build); the long runs (`savepoint sim --seeds
/// 300` and more, a release build at about 50 ms a seed) are their own command.
#[test]
fn a_seeded_slice_keeps_every_invariant() {
    let mut args = SimArgs::seeds(1, 100);
    args.jobs = Some(2);
    let failed = sim::run(&args);
    assert!(
        failed.is_empty(),
        "{:?}",
        failed
            .iter()
            .map(|r| (r.seed, r.violations.clone()))
            .collect::<Vec<_>>()
    );
}

/// Seeds that found a bug (with the workload as it was then), kept as regression tests:
/// 202297, `buffer_one`: a firing held earlier in the same pass was overtaken by a later one
/// when the run before it ended while the pass went on. (203351, 203608 and 208163 found a
/// run parked in a flow-control line past its deadline, but measured from the heal as it
/// came rather than as planned they no longer reach it: `tests/timeouts.rs` guards that.)
/// 366023, the due scanner: a ring that raced a worker's lease extension was marked queued,
/// pushing the run's safety net out 10 minutes; the worker died before its next extension
/// and its child run sat `running` under an expired lease (fails with the old `mark_queued`
/// and `claim`; `conformance_store.rs` guards it too).
const FOUND_BUGS: &[u64] = &[202_297, 366_023];

#[test]
fn seeds_that_found_bugs_keep_every_invariant() {
    for &seed in FOUND_BUGS {
        let report = sim::run_seed(seed, &SimArgs::seeds(seed, 1));
        assert!(report.violations.is_empty(), "seed {seed}: {:?}", report.violations);
    }
}

#[test]
fn a_seed_replays_the_same_trace() {
    let args = SimArgs::seeds(42, 1);
    let a = sim::run_seed(42, &args);
    let b = sim::run_seed(42, &args);
    assert!(a.trace.len() > 10, "{:?}", a.trace);
    assert_eq!(a.trace, b.trace);
    assert_eq!(a.trace_hash, b.trace_hash);
    assert_ne!(a.trace_hash, sim::run_seed(43, &args).trace_hash);
}

/// The checker must be able to fail: with the charge done in a plain step (no idempotency
/// key, no intent), crashes and redeliveries repeat it, and the provider's count shows it.
#[test]
fn the_checker_catches_a_side_effect_without_a_key() {
    let mut args = SimArgs::seeds(1, 60);
    args.jobs = Some(2);
    args.unguarded = true;
    let failed = sim::run(&args);
    assert!(
        failed.iter().any(|r| r
            .violations
            .iter()
            .any(|v| v.contains("charge:") && v.contains("applied"))),
        "no double charge found in 60 seeds: {:?}",
        failed
            .iter()
            .map(|r| (r.seed, r.violations.clone()))
            .collect::<Vec<_>>()
    );
}

/// The liveness invariant must be able to fail: with no worker ever giving back what it holds
/// (`worker.hand_back_ms = 0`), the busy-worker phase sees a task wait behind a worker whose
/// slots are all busy while the others ask for work.
#[test]
fn the_checker_catches_a_busy_worker_sitting_on_tasks() {
    let mut args = SimArgs::seeds(1, 2);
    args.jobs = Some(2);
    args.no_hand_back = true;
    let failed = sim::run(&args);
    let starved = failed
        .iter()
        .filter(|r| r.violations.iter().any(|v| v.starts_with("liveness (18)")))
        .count();
    assert_eq!(
        starved,
        2,
        "{:?}",
        failed
            .iter()
            .map(|r| (r.seed, r.violations.clone()))
            .collect::<Vec<_>>()
    );
}
