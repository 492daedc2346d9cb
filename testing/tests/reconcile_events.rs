//! A reconcile's decision on an in-doubt effect is in the run's events (`effect_reconciled`),
//! not only in the worker's log: an operator reading the run sees why an effect was or was not
//! called again after a crash.

use savepoint::workflow::Registry;
use savepoint_demo::{registry, Invoice, InvoiceIn};
use savepoint_store::RunStatus;
use savepoint_testing::{Setup, TestEnv};

fn demo(setup: &Setup) -> Registry {
    registry(setup.store())
}

/// Killed right after the ledger post's intent (not applied) or right after its call
/// (applied): the run completes and its events hold the reconcile's decision for the key.
#[tokio::test(start_paused = true)]
async fn a_reconcile_decision_is_recorded_in_the_runs_events() {
    for (spec, decision) in [
        ("effect.after_intent=abort@1", "not applied"),
        ("effect.after_call=abort@1", "applied: its recorded result"),
    ] {
        let mut env = TestEnv::new(demo).await.unwrap();
        env.crash_at(spec).unwrap();
        let input = InvoiceIn {
            invoice_id: "INV-R".into(),
            pdf_path: None,
        };
        let run = env.start::<Invoice>(&input).await.unwrap();
        let done = env.settle(&run).await.unwrap();
        assert_eq!(done.header.status, RunStatus::Completed, "{spec}: {:?}", done.header);
        assert_eq!(env.crashes(), 1, "{spec}");
        let events = env.store().events(&run, 200).await.unwrap();
        let reconciled: Vec<&str> = events
            .iter()
            .filter(|e| e.typ == "effect_reconciled")
            .map(|e| e.detail.as_str())
            .collect();
        assert_eq!(reconciled.len(), 1, "{spec}: {reconciled:?}");
        assert!(
            reconciled[0].contains("ledger:INV-R") && reconciled[0].contains(decision),
            "{spec}: {reconciled:?}"
        );
        env.shutdown().await;
    }
}
