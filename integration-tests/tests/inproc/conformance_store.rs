//! The store's conformance suite: every Lua script's validations (fence, version, journal
//! index, status) and writes, run against both backends: a real Redis and the embedded engine
//! (the same scripts in-process over the in-memory keyspace). A difference between the two is
//! a failing test here, so the backends cannot drift.

use serde_json::json;
use std::time::Duration;

use savepoint_core::ids::{EffectKey, ThreadId};
use savepoint_core::journal::{Entry, EntryKind, Outcome};
use savepoint_integration_tests::{embedded_config, fresh_namespace};
use savepoint_store::mem::MemEngine;
use savepoint_store::{Acquired, CatalogEntry, CreateOptions, Flow};
use savepoint_store::{BlockKind, ClaimOutcome, EffectClaim, Finish, Holder, RunStatus, ScriptStore, StoreError, Wait};
use savepoint_store::{CreateOutcome, EffectDone, EffectRelease, EffectUnused, RestartOutcome, RetryOutcome};
use savepoint_store::{JournalHeld, ServedSpec, SignalOutcome, StoreConfig, Suspend, FEATURES};
use savepoint_store::{PauseRecord, PauseScope, RunPaused, RunResumed};

#[cfg(feature = "services")]
async fn redis_store() -> ScriptStore {
    let cfg = savepoint_integration_tests::services()
        .await
        .config(&fresh_namespace("st"));
    ScriptStore::connect(&cfg.redis_url, cfg.keys(), cfg.store())
        .await
        .expect("redis")
}

fn embedded_store() -> ScriptStore {
    let cfg = embedded_config(&fresh_namespace("st"));
    ScriptStore::embedded(MemEngine::new(), cfg.keys(), cfg.store())
}

fn entry(name: &str) -> Entry {
    Entry::new(name, EntryKind::Step, Outcome::Ok(json!({"v": name})), 1)
}

async fn new_run(s: &ScriptStore, input: serde_json::Value) -> ThreadId {
    let t = ThreadId::generate("st");
    assert_eq!(
        s.create(&t, "wf", 1, &input.to_string(), "00-aa-bb-01").await.unwrap(),
        CreateOutcome::Created
    );
    t
}

async fn claim(s: &ScriptStore, t: &ThreadId, owner: &str) -> savepoint_store::Claimed {
    match s.claim(t, owner, None, &ServedSpec::any()).await.unwrap() {
        ClaimOutcome::Claimed(c) => *c,
        other => panic!("expected a claim, got {other:?}"),
    }
}

async fn create_is_idempotent_on_thread_workflow_and_input(s: ScriptStore) {
    let t = new_run(&s, json!({"a": 1})).await;
    assert_eq!(
        s.create(&t, "wf", 1, &json!({"a": 1}).to_string(), "").await.unwrap(),
        CreateOutcome::Exists(RunStatus::Pending)
    );
    assert_eq!(
        s.create(&t, "wf", 1, &json!({"a": 2}).to_string(), "").await.unwrap(),
        CreateOutcome::Conflict("wf".into())
    );
    assert_eq!(
        s.create(&t, "other", 1, &json!({"a": 1}).to_string(), "")
            .await
            .unwrap(),
        CreateOutcome::Conflict("wf".into())
    );
    let h = s.header(&t).await.unwrap().unwrap();
    assert_eq!((h.status, h.steps, h.version, h.fence), (RunStatus::Pending, 0, 1, 0));
    assert_eq!(h.trace.as_deref(), Some("00-aa-bb-01"));
    assert!(h.due.is_some(), "a new run has a safety-net due time");
}

async fn claim_outcomes_and_fenced_commits(s: ScriptStore) {
    let missing = ThreadId::generate("none");
    assert!(matches!(
        s.claim(&missing, "w", None, &ServedSpec::any()).await.unwrap(),
        ClaimOutcome::Missing
    ));
    let t = new_run(&s, json!(null)).await;
    let mut a = claim(&s, &t, "worker-a").await;
    assert_eq!(a.lease.fence, 1);
    assert!(!a.takeover);
    // A live lease: another worker (or a duplicate task) is turned away.
    assert!(
        matches!(s.claim(&t, "worker-b", None, &ServedSpec::any()).await.unwrap(), ClaimOutcome::Leased(o) if o == "worker-a")
    );
    s.commit(
        &mut a.lease,
        0,
        std::slice::from_ref(&entry("s0")),
        ("step_committed", "0 s0"),
        None,
    )
    .await
    .unwrap();
    // Wrong index and stale version are refused and change nothing.
    let before = s.header(&t).await.unwrap().unwrap();
    let mut stale = a.lease.clone();
    stale.version -= 1;
    assert!(matches!(
        s.commit(&mut stale, 1, std::slice::from_ref(&entry("s1")), ("x", ""), None)
            .await,
        Err(StoreError::Conflict { .. })
    ));
    assert!(matches!(
        s.commit(&mut a.lease, 5, std::slice::from_ref(&entry("s1")), ("x", ""), None)
            .await,
        Err(StoreError::Index { steps: 1, .. })
    ));
    assert_eq!(s.header(&t).await.unwrap().unwrap().version, before.version);
    // The lease expires; worker-b takes over with a higher fence.
    tokio::time::sleep(s.config().lease + Duration::from_millis(100)).await;
    let mut b = match s.claim(&t, "worker-b", Some(1), &ServedSpec::any()).await.unwrap() {
        ClaimOutcome::Claimed(c) => *c,
        other => panic!("{other:?}"),
    };
    assert!(b.takeover);
    assert_eq!(b.lease.fence, 2);
    assert_eq!(b.journal.as_ref().unwrap().len(), 1);
    // The stale writer (fence 1) is fenced off: nothing changes.
    let v = s.header(&t).await.unwrap().unwrap().version;
    let err = s
        .commit(&mut a.lease, 1, std::slice::from_ref(&entry("late")), ("x", ""), None)
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::Fenced { .. }), "{err}");
    assert!(matches!(s.heartbeat(&a.lease).await, Err(StoreError::Fenced { .. })));
    assert!(matches!(
        s.event(&a.lease, "retried", "x").await,
        Err(StoreError::Fenced { .. })
    ));
    let (h, j) = s.get(&t).await.unwrap().unwrap();
    assert_eq!((h.version, j.len()), (v, 1));
    // The new owner writes fine; heartbeats extend without bumping the version.
    s.commit(
        &mut b.lease,
        1,
        std::slice::from_ref(&entry("s1")),
        ("step_committed", "1 s1"),
        None,
    )
    .await
    .unwrap();
    let vb = b.lease.version;
    let (until, _) = s.heartbeat(&b.lease).await.unwrap();
    assert!(until > 0);
    assert_eq!(s.header(&t).await.unwrap().unwrap().version, vb);
    // A task behind the journal is stale once the run is runnable again.
    s.suspend(
        &mut b.lease,
        None,
        Suspend {
            status: RunStatus::Pending,
            due_in: Some(Duration::from_secs(60)),
            wait: None,
            backoff_on: None,
            drop_begin: None,
            queue: None,
        },
        ("yielded", ""),
    )
    .await
    .unwrap();
    assert!(matches!(
        s.claim(&t, "worker-c", Some(0), &ServedSpec::any()).await.unwrap(),
        ClaimOutcome::Stale(2)
    ));
    let events = s.events(&t, 100).await.unwrap();
    let types: Vec<&str> = events.iter().map(|e| e.typ.as_str()).collect();
    assert_eq!(
        types,
        [
            "created",
            "claimed",
            "step_committed",
            "takeover",
            "step_committed",
            "yielded"
        ]
    );
}

async fn sleeping_waiting_and_signals(s: ScriptStore) {
    let t = new_run(&s, json!(null)).await;
    let mut c = claim(&s, &t, "w").await;
    let sleep = Entry::new("nap", EntryKind::Sleep, Outcome::Ok(json!({})), 1);
    s.suspend(
        &mut c.lease,
        Some((0, std::slice::from_ref(&sleep))),
        Suspend {
            status: RunStatus::Sleeping,
            due_in: Some(Duration::from_secs(3600)),
            wait: None,
            backoff_on: None,
            drop_begin: None,
            queue: None,
        },
        ("slept", "nap"),
    )
    .await
    .unwrap();
    assert!(matches!(
        s.claim(&t, "w", None, &ServedSpec::any()).await.unwrap(),
        ClaimOutcome::NotDue(_)
    ));
    // Short sleep: due soon, then claimable.
    let t2 = new_run(&s, json!(null)).await;
    let mut c2 = claim(&s, &t2, "w").await;
    s.suspend(
        &mut c2.lease,
        Some((0, std::slice::from_ref(&sleep))),
        Suspend {
            status: RunStatus::Sleeping,
            due_in: Some(Duration::from_millis(50)),
            wait: None,
            backoff_on: None,
            drop_begin: None,
            queue: None,
        },
        ("slept", "nap"),
    )
    .await
    .unwrap();
    tokio::time::sleep(Duration::from_millis(80)).await;
    assert!(matches!(
        s.claim(&t2, "w", None, &ServedSpec::any()).await.unwrap(),
        ClaimOutcome::Claimed(_)
    ));
    // Waiting for an interrupt: resume wakes it; a resume while not waiting is refused.
    let t3 = new_run(&s, json!(null)).await;
    assert!(matches!(
        s.signal(&t3, "interrupt", "", &json!("yes"), None).await.unwrap(),
        SignalOutcome::NotWaiting(..)
    ));
    let mut c3 = claim(&s, &t3, "w").await;
    let wait = Wait {
        kind: "interrupt".into(),
        name: "gate".into(),
        payload: json!({"q": 1}),
    };
    let r = s
        .suspend(
            &mut c3.lease,
            None,
            Suspend {
                status: RunStatus::Waiting,
                due_in: None,
                wait: Some(&wait),
                backoff_on: None,
                drop_begin: None,
                queue: None,
            },
            ("interrupted", "gate"),
        )
        .await
        .unwrap();
    assert!(!r.woke);
    assert!(matches!(
        s.claim(&t3, "w", None, &ServedSpec::any()).await.unwrap(),
        ClaimOutcome::Waiting
    ));
    let h = s.header(&t3).await.unwrap().unwrap();
    assert_eq!(
        (h.status, h.wait.clone(), h.due),
        (RunStatus::Waiting, Some(wait.clone()), None)
    );
    assert!(matches!(
        s.signal(&t3, "interrupt", "", &json!("yes"), None).await.unwrap(),
        SignalOutcome::Woke(_)
    ));
    let mut c3 = claim(&s, &t3, "w").await;
    assert_eq!(c3.signals.get("i:gate"), Some(&json!("yes")));
    let answered = Entry::new("gate", EntryKind::Interrupt, Outcome::Ok(json!("yes")), 1);
    s.commit(
        &mut c3.lease,
        0,
        std::slice::from_ref(&answered),
        ("interrupt_answered", "gate"),
        Some("i:gate"),
    )
    .await
    .unwrap();
    // Signals sent early are buffered, in order; a wait for a buffered signal wakes at once.
    assert_eq!(
        s.signal(&t3, "signal", "go", &json!(1), None).await.unwrap(),
        SignalOutcome::Buffered
    );
    assert_eq!(
        s.signal(&t3, "signal", "go", &json!(2), None).await.unwrap(),
        SignalOutcome::Buffered
    );
    let wait_go = Wait {
        kind: "signal".into(),
        name: "go".into(),
        payload: json!(null),
    };
    let r = s
        .suspend(
            &mut c3.lease,
            None,
            Suspend {
                status: RunStatus::Waiting,
                due_in: None,
                wait: Some(&wait_go),
                backoff_on: None,
                drop_begin: None,
                queue: None,
            },
            ("waiting_signal", "go"),
        )
        .await
        .unwrap();
    assert!(r.woke, "the buffered signal must not be stranded");
    let c4 = claim(&s, &t3, "w").await;
    let keys: Vec<&String> = c4.signals.keys().collect();
    assert_eq!(keys.len(), 2);
    assert!(keys[0] < keys[1] && c4.signals[keys[0]] == json!(1));
}

async fn finish_cancel_unblock_and_retention(s: ScriptStore) {
    let t = new_run(&s, json!(null)).await;
    let mut c = claim(&s, &t, "w").await;
    // Two unwritten entries (the second among the script's trailing arguments) and an output
    // at version 3 of its type, kept with it for a parent.
    let ov = savepoint_core::model::OutputVersion {
        type_name: "shop::Price".into(),
        version: 3,
    };
    s.finish(
        &mut c.lease,
        Some((0, &[entry("s0"), entry("s1")])),
        Finish::Completed(&json!({"ok": true}), Some(&ov)),
        ("completed", ""),
    )
    .await
    .unwrap();
    let (h, journal) = s.get(&t).await.unwrap().unwrap();
    assert_eq!(
        (h.status, h.steps, h.output.clone(), h.output_version),
        (RunStatus::Completed, 2, Some(json!({"ok": true})), Some(ov))
    );
    assert_eq!(
        journal.iter().map(|e| e.name.as_str()).collect::<Vec<_>>(),
        ["s0", "s1"]
    );
    // A completion without a version clears one left in the hash (a restart by a scheduler
    // from before the field keeps it).
    let again = new_run(&s, json!(null)).await;
    let mut c_again = claim(&s, &again, "w").await;
    let run_key = s.keys().run(&again).run.clone();
    let _: i64 = s
        .query(redis::cmd("HSET").arg(&run_key).arg("ov").arg("shop::Price@3"))
        .await
        .unwrap();
    s.finish(
        &mut c_again.lease,
        None,
        Finish::Completed(&json!(1), None),
        ("completed", ""),
    )
    .await
    .unwrap();
    assert_eq!(s.header(&again).await.unwrap().unwrap().output_version, None);
    let ttl: i64 = s.query(redis::cmd("PTTL").arg(&s.keys().run(&t).run)).await.unwrap();
    assert!(
        ttl > 0 && ttl <= s.config().retention.as_millis() as i64,
        "finished runs expire: ttl {ttl}"
    );
    assert!(matches!(
        s.claim(&t, "w", None, &ServedSpec::any()).await.unwrap(),
        ClaimOutcome::Terminal(RunStatus::Completed)
    ));
    assert_eq!(s.cancel(&t, "x").await.unwrap(), Err(RunStatus::Completed));
    // Cancel moves the fence: the running worker is refused at its next write.
    let t2 = new_run(&s, json!(null)).await;
    let mut c2 = claim(&s, &t2, "w").await;
    assert_eq!(s.cancel(&t2, "operator").await.unwrap().map(|c| c.settled), Ok(vec![]));
    assert!(matches!(
        s.commit(&mut c2.lease, 0, std::slice::from_ref(&entry("s0")), ("x", ""), None)
            .await,
        Err(StoreError::Fenced { .. })
    ));
    // Blocked on an effect, then unblocked by an operator.
    let t3 = new_run(&s, json!(null)).await;
    let mut c3 = claim(&s, &t3, "w").await;
    let holder = Holder {
        thread: t3.to_string(),
        index: 0,
        fence: 1,
    };
    s.finish(
        &mut c3.lease,
        None,
        Finish::Blocked {
            reason: "effect k outcome unknown",
            kind: BlockKind::InDoubt,
            effect: Some(("k", &holder)),
        },
        ("blocked", ""),
    )
    .await
    .unwrap();
    let ttl: i64 = s.query(redis::cmd("PTTL").arg(&s.keys().run(&t3).run)).await.unwrap();
    assert_eq!(ttl, -1, "blocked runs wait for an operator and do not expire");
    assert_eq!(
        s.header(&t3).await.unwrap().unwrap().block_kind,
        Some(BlockKind::InDoubt)
    );
    assert_eq!(
        s.unblock(&t3, "other", "").await.unwrap(),
        Err(("blocked".into(), "k".into()))
    );
    assert!(s.unblock(&t3, "k", "applied").await.unwrap().is_ok());
    let h = s.header(&t3).await.unwrap().unwrap();
    assert_eq!((h.status, h.reason, h.blocked_effect), (RunStatus::Pending, None, None));
    assert_eq!(h.block_kind, None);
}

async fn scan_due_hands_each_run_out_once_per_period(s: ScriptStore) {
    let mut threads = Vec::new();
    for _ in 0..20 {
        let t = new_run(&s, json!(null)).await;
        let mut c = claim(&s, &t, "w").await;
        s.suspend(
            &mut c.lease,
            None,
            Suspend {
                status: RunStatus::Sleeping,
                due_in: Some(Duration::from_millis(1)),
                wait: None,
                backoff_on: None,
                drop_begin: None,
                queue: None,
            },
            ("slept", ""),
        )
        .await
        .unwrap();
        threads.push(t);
    }
    tokio::time::sleep(Duration::from_millis(20)).await;
    let mut seen = Vec::new();
    for p in 0..s.keys().partitions() {
        let (_, a) = s.scan_due(p, 1000, Duration::from_secs(60)).await.unwrap();
        let (_, b) = s.scan_due(p, 1000, Duration::from_secs(60)).await.unwrap();
        let a: Vec<ThreadId> = a.into_iter().map(|r| r.thread).collect();
        let b: Vec<ThreadId> = b.into_iter().map(|r| r.thread).collect();
        assert!(
            b.iter().all(|t| !a.contains(t)),
            "a run was handed out twice within one period"
        );
        seen.extend(a);
        seen.extend(b);
    }
    seen.sort();
    threads.sort();
    let due: Vec<_> = seen.into_iter().filter(|t| threads.contains(t)).collect();
    assert_eq!(due, threads);
}

/// Found by the simulator (seed 39517): the scanner rang a running run whose worker was
/// stalled, its publish was confirmed late, and by then the worker had put the run to sleep;
/// marking that stale task queued pushed the run's due time out by the queued-redeliver
/// delay (10 minutes), so its 1-second timer fired 10 minutes late. Every write that starts a
/// new due regime raises the ring version, so the late mark is refused.
async fn a_task_published_before_a_suspend_does_not_delay_the_wake_up(s: ScriptStore) {
    let t = new_run(&s, json!(null)).await;
    let mut c = claim(&s, &t, "w").await;
    // A scanner rang the run under this lease (its worker looked stalled) and published a
    // task: the publisher holds the ring version it read then.
    let k = s.keys().run(&t);
    let rv_seen: u64 = s.query(redis::cmd("HGET").arg(&k.run).arg("rv")).await.unwrap();
    let slept = s
        .suspend(
            &mut c.lease,
            None,
            Suspend::until(RunStatus::Sleeping, Duration::from_secs(1)),
            ("slept", ""),
        )
        .await
        .unwrap();
    let wake = slept.due.expect("a wake time");
    // The stale confirm arrives now.
    assert_eq!(
        s.mark_queued(&[(t.clone(), rv_seen)]).await.unwrap(),
        0,
        "a stale task is not marked"
    );
    let score: Option<f64> = s.query(redis::cmd("ZSCORE").arg(&k.due).arg(t.as_str())).await.unwrap();
    assert_eq!(
        score.map(|x| x as u64),
        Some(wake),
        "the wake time stays the run's due time"
    );
    // A task published after the suspend (with its rv) is marked as before.
    assert_eq!(s.mark_queued(&[(t.clone(), slept.rv)]).await.unwrap(), 1);
}

/// A done record's lifetime (issue 49, hole 2): no expiry until its owner journals it; then
/// the effect TTL. Another run that found it done does not give it one before the owner has
/// journaled it; an intent never gets one; a cancel gives one to what its run recorded, by
/// its own call or by an operator's settle for it.
async fn a_done_record_lives_until_its_owner_journals_it_or_ends(s: ScriptStore) {
    let ttl = |key: EffectKey| {
        let s = s.clone();
        async move {
            let t: i64 = s.query(redis::cmd("PTTL").arg(s.keys().effect(&key))).await.unwrap();
            t
        }
    };
    let (a, b) = (ThreadId::generate("a"), ThreadId::generate("b"));
    let key = EffectKey::new(format!("mail:{}", uuid::Uuid::new_v4())).unwrap();
    assert_eq!(s.effect_intent(&key, &a, 2, 1, false).await.unwrap(), EffectClaim::Won);
    assert!(!s.effect_expire(&key, &a, 2).await.unwrap(), "an intent never expires");
    assert_eq!(ttl(key.clone()).await, -1);
    s.effect_done(&key, &a, 2, 1, &json!("sent")).await.unwrap();
    assert_eq!(ttl(key.clone()).await, -1, "the only proof: no expiry");
    assert!(
        !s.effect_expire(&key, &b, 0).await.unwrap(),
        "another run found it: the owner still needs it"
    );
    assert_eq!(ttl(key.clone()).await, -1);
    assert!(!s.effect_expire(&key, &a, 3).await.unwrap(), "not the owner's call");
    assert!(s.effect_expire(&key, &a, 2).await.unwrap(), "the owner journaled it");
    assert!(ttl(key.clone()).await > 0);
    assert!(
        s.effect_expire(&key, &b, 0).await.unwrap(),
        "journaled by its owner: refreshed"
    );
    // An operator's settle for a run that is then cancelled before it journals it.
    let settled = EffectKey::new(format!("mail:{}", uuid::Uuid::new_v4())).unwrap();
    assert_eq!(
        s.effect_intent(&settled, &a, 4, 1, false).await.unwrap(),
        EffectClaim::Won
    );
    s.settle_done(&settled, &a, &json!("sent"), None).await.unwrap();
    assert_eq!(ttl(settled.clone()).await, -1);
    assert!(
        !s.effect_orphan(&settled, &a, 4, "cancelled").await.unwrap(),
        "done, not an intent"
    );
    assert!(ttl(settled.clone()).await > 0, "its run ended: the record expires");
    // The run's own done record, never journaled, at a cancel.
    let own = EffectKey::new(format!("mail:{}", uuid::Uuid::new_v4())).unwrap();
    assert_eq!(s.effect_intent(&own, &b, 1, 1, false).await.unwrap(), EffectClaim::Won);
    s.effect_done(&own, &b, 1, 1, &json!("sent")).await.unwrap();
    assert!(!s.effect_orphan(&own, &b, 1, "cancelled").await.unwrap());
    assert!(ttl(own.clone()).await > 0);
}

async fn effect_records_intent_done_release(s: ScriptStore) {
    let key = EffectKey::new(format!("charge:{}", uuid::Uuid::new_v4())).unwrap();
    let (t1, t2) = (ThreadId::generate("a"), ThreadId::generate("b"));
    let h1 = |index: i64, fence: u64| Holder {
        thread: t1.to_string(),
        index,
        fence,
    };
    assert_eq!(s.effect_intent(&key, &t1, 3, 1, false).await.unwrap(), EffectClaim::Won);
    // The intent never expires (an in-doubt effect must not silently become "absent").
    let ttl: i64 = s.query(redis::cmd("PTTL").arg(s.keys().effect(&key))).await.unwrap();
    assert_eq!(ttl, -1, "intent records have no TTL");
    // Same attempt asking again (a lost reply): still ours. Another run: busy. A later
    // attempt: in doubt, and only a higher fence takes it over.
    assert_eq!(s.effect_intent(&key, &t1, 3, 1, false).await.unwrap(), EffectClaim::Won);
    assert_eq!(
        s.effect_intent(&key, &t2, 0, 1, false).await.unwrap(),
        EffectClaim::Busy(h1(3, 1))
    );
    assert_eq!(
        s.effect_intent(&key, &t1, 3, 2, false).await.unwrap(),
        EffectClaim::InDoubt(h1(3, 1))
    );
    assert_eq!(s.effect_intent(&key, &t1, 3, 2, true).await.unwrap(), EffectClaim::Won);
    // The stale attempt (fence 1) can neither take it back nor mark it done nor free it.
    assert_eq!(
        s.effect_intent(&key, &t1, 3, 1, true).await.unwrap(),
        EffectClaim::Stale(2)
    );
    assert_eq!(
        s.effect_done(&key, &t1, 3, 1, &json!("stale")).await.unwrap(),
        EffectDone::Stale
    );
    assert!(matches!(
        s.effect_release(&key, &t1, 3, 1).await.unwrap(),
        EffectRelease::NotOwner(_)
    ));
    // The same attempt at another index: one key used twice at once.
    assert_eq!(
        s.effect_intent(&key, &t1, 5, 2, false).await.unwrap(),
        EffectClaim::SelfHeld(3)
    );
    assert_eq!(
        s.effect_done(&key, &t2, 0, 1, &json!(1)).await.unwrap(),
        EffectDone::NotOwner(t1.to_string())
    );
    assert_eq!(
        s.effect_done(&key, &t1, 3, 2, &json!({"id": 7})).await.unwrap(),
        EffectDone::Recorded
    );
    // A retried done (lost reply) answers with the first result.
    assert_eq!(
        s.effect_done(&key, &t1, 3, 2, &json!({"id": 8})).await.unwrap(),
        EffectDone::Already(json!({"id": 7}))
    );
    assert_eq!(
        s.effect_intent(&key, &t2, 0, 1, false).await.unwrap(),
        EffectClaim::Done(json!({"id": 7}))
    );
    assert_eq!(
        s.effect_release(&key, &t1, 3, 2).await.unwrap(),
        EffectRelease::Done(json!({"id": 7}))
    );
    let key2 = EffectKey::new(format!("mail:{}", uuid::Uuid::new_v4())).unwrap();
    assert_eq!(
        s.effect_intent(&key2, &t1, 0, 1, false).await.unwrap(),
        EffectClaim::Won
    );
    assert!(matches!(
        s.effect_release(&key2, &t2, 0, 1).await.unwrap(),
        EffectRelease::NotOwner(_)
    ));
    assert!(
        matches!(
            s.effect_release(&key2, &t1, 0, 9).await.unwrap(),
            EffectRelease::NotOwner(_)
        ),
        "another attempt frees nothing"
    );
    assert_eq!(
        s.effect_release(&key2, &t1, 0, 1).await.unwrap(),
        EffectRelease::Released
    );
    assert_eq!(
        s.effect_release(&key2, &t1, 0, 1).await.unwrap(),
        EffectRelease::Absent,
        "a retried release is harmless"
    );
    assert_eq!(
        s.effect_intent(&key2, &t2, 0, 1, false).await.unwrap(),
        EffectClaim::Won
    );
}

/// An intent whose owner ended becomes an explicit in-doubt record; an operator settles
/// exactly the record a blocked run names, never a newer one.
async fn orphaned_intents_and_operator_settlement(s: ScriptStore) {
    let key = EffectKey::new(format!("charge:{}", uuid::Uuid::new_v4())).unwrap();
    let (t1, t2) = (ThreadId::generate("a"), ThreadId::generate("b"));
    assert_eq!(s.effect_intent(&key, &t1, 2, 4, false).await.unwrap(), EffectClaim::Won);
    assert!(
        !s.effect_orphan(&key, &t2, 2, "cancelled").await.unwrap(),
        "not t2's intent"
    );
    assert!(
        !s.effect_orphan(&key, &t1, 9, "cancelled").await.unwrap(),
        "not that index"
    );
    assert!(s.effect_orphan(&key, &t1, 2, "cancelled").await.unwrap());
    let owner = Holder {
        thread: t1.to_string(),
        index: 2,
        fence: 4,
    };
    assert_eq!(
        s.effect_intent(&key, &t2, 0, 1, false).await.unwrap(),
        EffectClaim::Orphaned(owner.clone(), "cancelled".into())
    );
    // A resolver naming another holder changes nothing.
    let other = Holder {
        fence: 5,
        ..owner.clone()
    };
    assert!(matches!(
        s.settle_released(&key, &t2, Some(&other)).await.unwrap(),
        EffectRelease::Changed(_)
    ));
    assert!(matches!(
        s.settle_done(&key, &t2, &json!(1), Some(&other)).await.unwrap(),
        EffectDone::Changed(_)
    ));
    assert_eq!(
        s.settle_released(&key, &t2, Some(&owner)).await.unwrap(),
        EffectRelease::Released
    );
    // The run re-runs and takes a new intent; a second (late) resolver for the old record
    // must not free it.
    assert_eq!(s.effect_intent(&key, &t2, 0, 2, false).await.unwrap(), EffectClaim::Won);
    assert!(matches!(
        s.settle_released(&key, &t2, Some(&owner)).await.unwrap(),
        EffectRelease::Changed(_)
    ));
    assert_eq!(
        s.effect_intent(&key, &t2, 0, 2, false).await.unwrap(),
        EffectClaim::Won,
        "the live intent survived the late resolver"
    );
}

/// A delivered answer that did not decode: `finish` with `Rejected` blocks the run, drops the
/// answer, keeps the wait and sets no finish time; `signal` takes a new answer for it, which
/// unblocks it. An operator's result that did not decode is taken back by `effect_reopen`
/// (only an operator's record), so the run can be resolved again.
async fn rejected_answers_and_reopened_results(s: ScriptStore) {
    let t = new_run(&s, json!({})).await;
    let c = claim(&s, &t, "w1").await;
    let mut lease = c.lease.clone();
    let wait = Wait {
        kind: "interrupt".into(),
        name: "gate".into(),
        payload: json!({"q": 1}),
    };
    s.suspend(&mut lease, None, Suspend::waiting(&wait), ("interrupted", "gate"))
        .await
        .unwrap();
    assert!(matches!(
        s.signal(&t, "interrupt", "", &json!("yes"), None).await.unwrap(),
        SignalOutcome::Woke(_)
    ));
    let c = claim(&s, &t, "w1").await;
    assert_eq!(c.signals.get("i:gate"), Some(&json!("yes")));
    let mut lease = c.lease.clone();
    let how = Finish::Rejected {
        reason: "the value sent to interrupt \"gate\" does not decode",
        wait: &wait,
        consumed: "i:gate",
    };
    s.finish(&mut lease, None, how, ("blocked", "bad answer"))
        .await
        .unwrap();
    let h = s.header(&t).await.unwrap().unwrap();
    assert_eq!(h.status, RunStatus::Blocked);
    assert_eq!(h.wait.as_ref().map(|w| w.name.as_str()), Some("gate"), "{h:?}");
    assert_eq!(h.finished_at, None, "a blocked run has not finished");
    assert!(h.reason.as_deref().unwrap_or("").contains("does not decode"));
    assert_eq!(h.block_kind, Some(BlockKind::Undecodable));
    assert_eq!(s.list(Some(RunStatus::Blocked), 10).await.unwrap().len(), 1);
    // A signal of another kind is only buffered; the answer unblocks it.
    assert!(matches!(
        s.signal(&t, "signal", "other", &json!(1), None).await.unwrap(),
        SignalOutcome::Buffered
    ));
    assert!(matches!(
        s.signal(&t, "interrupt", "", &json!({"ok": true}), None).await.unwrap(),
        SignalOutcome::Woke(_)
    ));
    let h = s.header(&t).await.unwrap().unwrap();
    assert_eq!(
        (h.status, h.reason.clone(), h.block_kind),
        (RunStatus::Pending, None, None),
        "{h:?}"
    );
    assert!(s.list(Some(RunStatus::Blocked), 10).await.unwrap().is_empty());
    let c = claim(&s, &t, "w1").await;
    assert_eq!(
        c.signals.get("i:gate"),
        Some(&json!({"ok": true})),
        "the rejected answer is gone"
    );

    let key = EffectKey::new(format!("charge:{}", uuid::Uuid::new_v4())).unwrap();
    // A worker's done record is not reopened.
    assert_eq!(s.effect_intent(&key, &t, 3, 5, false).await.unwrap(), EffectClaim::Won);
    assert_eq!(
        s.effect_done(&key, &t, 3, 5, &json!({"id": 1})).await.unwrap(),
        EffectDone::Recorded
    );
    assert!(!s.effect_reopen(&key, &t, 3, 6).await.unwrap());
    // An operator's is: it becomes this run's in-doubt intent, which a resolver naming that
    // holder settles again.
    let key = EffectKey::new(format!("charge:{}", uuid::Uuid::new_v4())).unwrap();
    assert_eq!(s.effect_intent(&key, &t, 3, 5, false).await.unwrap(), EffectClaim::Won);
    assert_eq!(
        s.settle_done(&key, &t, &json!({"id": 1}), None).await.unwrap(),
        EffectDone::Recorded
    );
    assert!(s.effect_reopen(&key, &t, 3, 6).await.unwrap());
    let holder = Holder {
        thread: t.to_string(),
        index: 3,
        fence: 6,
    };
    assert_eq!(
        s.effect_intent(&key, &t, 3, 7, false).await.unwrap(),
        EffectClaim::InDoubt(holder.clone())
    );
    assert_eq!(
        s.settle_done(&key, &t, &json!({"charge_id": "c"}), Some(&holder))
            .await
            .unwrap(),
        EffectDone::Recorded
    );
    assert!(matches!(
        s.effect_intent(&key, &t, 3, 7, false).await.unwrap(),
        EffectClaim::Done(v) if v == json!({"charge_id": "c"})
    ));
}

/// Rolling deploys: a run records the features it uses, and a claim that does not name one
/// of them (an older worker) gives the run back untouched, saying which; a fork needs what its
/// source needs (less the deadline it does not inherit).
async fn a_run_that_needs_a_feature_the_worker_does_not_know_is_given_back_untouched(s: ScriptStore) {
    let t = ThreadId::generate("feat");
    let opts = CreateOptions {
        timeout: Some(Duration::from_secs(600)),
        flow: Some(Flow {
            key: "wf:acme".into(),
            limit: 2,
            rate: None,
        }),
        ..CreateOptions::default()
    };
    let created = s.create_with(&t, "wf", 1, "null", "", &opts).await.unwrap();
    assert_eq!(created, CreateOutcome::Created);
    let h = s.header(&t).await.unwrap().unwrap();
    assert_eq!(h.needs, vec!["deadline".to_owned(), "flow".to_owned()]);
    let entries = [CatalogEntry {
        name: "wf".into(),
        version: 1,
        min_version: 1,
        input_version: None,
        input_type: None,
    }];
    let older = ServedSpec::new(&entries).knowing(&["child", "deadline", "queue"]);
    match s.claim(&t, "old-worker", None, &older).await.unwrap() {
        ClaimOutcome::Unserved { reason, .. } => assert_eq!(
            reason, "waiting for a worker that knows the run feature flow (a newer build)",
            "the reason names the feature"
        ),
        other => panic!("an older worker must give the run back, got {other:?}"),
    }
    let h = s.header(&t).await.unwrap().unwrap();
    assert_eq!((h.status, h.fence, h.attempt), (RunStatus::Pending, 0, 0), "untouched");
    assert!(
        h.waiting_for.as_deref().is_some_and(|w| w.contains("feature flow")),
        "{h:?}"
    );
    // A versioned input (issue 28): the build before versions (which knew these six features)
    // gives the run back; the input's version is kept in the run.
    let versioned = ThreadId::generate("feat-iv");
    let opts = CreateOptions {
        input_version: Some(2),
        ..CreateOptions::default()
    };
    s.create_with(&versioned, "wf", 1, "{}", "", &opts).await.unwrap();
    let h = s.header(&versioned).await.unwrap().unwrap();
    assert_eq!(
        (h.needs.clone(), h.input_version),
        (vec!["input_version".to_owned()], Some(2))
    );
    let before_versions = ["child", "deadline", "flow", "flow_rate", "priority", "queue"];
    let previous = ServedSpec::new(&entries).knowing(&before_versions);
    match s.claim(&versioned, "previous-build", None, &previous).await.unwrap() {
        ClaimOutcome::Unserved { reason, .. } => assert!(reason.contains("feature input_version"), "{reason}"),
        other => panic!("the build before versions must give the run back, got {other:?}"),
    }
    // An input at version 3 of its type: a worker whose code knows the type up to version 2
    // gives the run back untouched (it would only block on it); one that knows version 3 runs it.
    let typed = ThreadId::generate("feat-value");
    let opts = CreateOptions {
        input_version: Some(3),
        input_type: Some("app::Order".into()),
        ..CreateOptions::default()
    };
    s.create_with(&typed, "wf", 1, "{}", "", &opts).await.unwrap();
    let h = s.header(&typed).await.unwrap().unwrap();
    assert_eq!(
        h.needs,
        vec!["input_version".to_owned(), "value:app::Order@3".to_owned()]
    );
    let knows = |extra: &[&'static str]| {
        let mut f = FEATURES.to_vec();
        f.extend_from_slice(extra);
        ServedSpec::new(&entries).knowing(&f)
    };
    match s
        .claim(&typed, "v2-build", None, &knows(&["value:app::Order@2"]))
        .await
        .unwrap()
    {
        ClaimOutcome::Unserved { reason, .. } => assert!(reason.contains("feature value:app::Order@3"), "{reason}"),
        other => panic!("a build that knows version 2 must give the run back, got {other:?}"),
    }
    let h = s.header(&typed).await.unwrap().unwrap();
    assert_eq!((h.status, h.fence, h.attempt), (RunStatus::Pending, 0, 0), "untouched");
    let both = knows(&["value:app::Order@2", "value:app::Order@3"]);
    assert!(matches!(
        s.claim(&typed, "v3-build", None, &both).await.unwrap(),
        ClaimOutcome::Claimed(_)
    ));
    // A run of a newer build names a feature this build has never heard of.
    let future = new_run(&s, json!(1)).await;
    let run_key = s.keys().run(&future).run;
    let _: () = s
        .query(redis::cmd("HSET").arg(&run_key).arg("needs").arg("flow\u{1f}teleport"))
        .await
        .unwrap();
    match s
        .claim(&future, "this-build", None, &ServedSpec::new(&entries))
        .await
        .unwrap()
    {
        ClaimOutcome::Unserved { reason, .. } => assert!(reason.contains("feature teleport"), "{reason}"),
        other => panic!("a run of a newer build must be given back, got {other:?}"),
    }
    // This build knows every feature the first run uses: it claims it.
    let c = match s
        .claim(&t, "this-build", None, &ServedSpec::new(&entries))
        .await
        .unwrap()
    {
        ClaimOutcome::Claimed(c) => c,
        other => panic!("expected a claim, got {other:?}"),
    };
    assert_eq!(c.lease.fence, 1);
    let fork = ThreadId::generate("feat-fork");
    s.fork(&t, 0, &fork, "").await.unwrap();
    let f = s.header(&fork).await.unwrap().unwrap();
    assert_eq!(
        f.needs,
        vec!["flow".to_owned()],
        "a fork keeps the flow limit, not the deadline"
    );
}

/// An attempt that took an intent and stopped before calling the effect records so when it
/// cannot free the intent: a block on that holder is refused (the caller takes it over), and
/// a run that had already blocked on it is pending again. The mark only ever rises.
async fn an_unused_intent_recorded_by_its_holder_is_not_blocked_on(s: ScriptStore) {
    let t = new_run(&s, json!(null)).await;
    let key = EffectKey::new(format!("mail:{}", uuid::Uuid::new_v4())).unwrap();
    let mut a = claim(&s, &t, "w").await;
    assert_eq!(s.effect_intent(&key, &t, 0, 1, false).await.unwrap(), EffectClaim::Won);
    let holder = |fence: u64| Holder {
        thread: t.to_string(),
        index: 0,
        fence,
    };
    assert_eq!(s.effect_unused(&t, 0, 1).await.unwrap(), EffectUnused::Recorded);
    let version = a.lease.version;
    let refused = s
        .finish(
            &mut a.lease,
            None,
            Finish::Blocked {
                reason: "in doubt",
                kind: BlockKind::InDoubt,
                effect: Some((key.as_str(), &holder(1))),
            },
            ("blocked", "in doubt"),
        )
        .await;
    assert!(
        matches!(refused, Err(StoreError::UnusedIntent { index: 0, fence: 1 })),
        "{refused:?}"
    );
    assert_eq!(a.lease.version, version, "nothing written");
    assert_eq!(s.header(&t).await.unwrap().unwrap().status, RunStatus::Running);
    // A holder that recorded nothing (fence 2: its call may have started) is in doubt.
    s.finish(
        &mut a.lease,
        None,
        Finish::Blocked {
            reason: "in doubt",
            kind: BlockKind::InDoubt,
            effect: Some((key.as_str(), &holder(2))),
        },
        ("blocked", "in doubt"),
    )
    .await
    .unwrap();
    assert_eq!(s.header(&t).await.unwrap().unwrap().status, RunStatus::Blocked);
    // Its holder says, late, that it never called the effect: the run is pending again.
    assert!(matches!(
        s.effect_unused(&t, 0, 2).await.unwrap(),
        EffectUnused::Unblocked(_)
    ));
    let h = s.header(&t).await.unwrap().unwrap();
    assert_eq!((h.status, h.blocked_effect), (RunStatus::Pending, None));
    // An older attempt's late word does not lower the mark.
    assert_eq!(s.effect_unused(&t, 0, 1).await.unwrap(), EffectUnused::Recorded);
    let run_key = s.keys().run(&t).run;
    let mark: Option<String> = s.query(redis::cmd("HGET").arg(&run_key).arg("u:0")).await.unwrap();
    assert_eq!(mark.as_deref(), Some("2"));
    assert_eq!(
        s.effect_unused(&ThreadId::generate("none"), 0, 1).await.unwrap(),
        EffectUnused::Missing
    );
}

/// Found by the simulator (seed 366023): a worker's lease extension landed between a scanner's
/// ring of its run (the worker looked stalled) and the mark of that ring's task; the task was
/// consumed and refused `leased`, and the mark pushed the run's safety net out by the
/// queued-redeliver delay (10 minutes). The worker then died before its next extension, and
/// its run sat `running` under an expired lease for those 10 minutes. A leased run's task is
/// never marked (its holder, not the queue, carries its work), and a claim refused `leased`
/// raises the ring version (the task is dropped), so a mark after it is refused too.
async fn a_task_for_a_leased_run_does_not_push_its_safety_net_out(s: ScriptStore) {
    let t = new_run(&s, json!(null)).await;
    let c = claim(&s, &t, "w").await;
    let k = s.keys().run(&t);
    let rv = |s: &ScriptStore| {
        let key = k.run.clone();
        let s = s.clone();
        async move {
            let v: u64 = s.query(redis::cmd("HGET").arg(&key).arg("rv")).await.unwrap();
            v
        }
    };
    let score = |s: &ScriptStore| {
        let (due, t) = (k.due.clone(), t.clone());
        let s = s.clone();
        async move {
            let v: Option<f64> = s.query(redis::cmd("ZSCORE").arg(&due).arg(t.as_str())).await.unwrap();
            v.map(|x| x as u64)
        }
    };
    // A scanner rang the run and published a task; the lease is live when the mark arrives.
    let rv_seen = rv(&s).await;
    let net = score(&s).await;
    assert_eq!(
        net, c.header.due,
        "a running run's due time is its lease's expiry plus grace"
    );
    assert_eq!(
        s.mark_queued(&[(t.clone(), rv_seen)]).await.unwrap(),
        0,
        "a leased run's task is not marked queued"
    );
    assert_eq!(score(&s).await, net, "the lease's expiry stays the run's safety net");
    // Another worker consumed that task: refused, it drops it, and the ring moves on.
    assert!(matches!(
        s.claim(&t, "w2", None, &ServedSpec::any()).await.unwrap(),
        ClaimOutcome::Leased(o) if o == "w"
    ));
    assert!(
        rv(&s).await > rv_seen,
        "a claim refused as leased raises the ring version"
    );
    assert_eq!(s.mark_queued(&[(t.clone(), rv_seen)]).await.unwrap(), 0);
    assert_eq!(score(&s).await, net);
}

/// The run hash's `bk` field of run `t`, as stored.
async fn stored_block_kind(s: &ScriptStore, t: &ThreadId) -> Option<String> {
    s.query(redis::cmd("HGET").arg(&s.keys().run(t).run).arg("bk"))
        .await
        .unwrap()
}

/// Blocks a freshly claimed run `t` with a block of `kind` (no effect).
async fn block_as(s: &ScriptStore, t: &ThreadId, kind: BlockKind) {
    let mut c = claim(s, t, "w").await;
    let how = Finish::Blocked {
        reason: "workflow code panicked after entry 0: boom",
        kind,
        effect: None,
    };
    s.finish(&mut c.lease, None, how, ("blocked", "")).await.unwrap();
}

/// A store on the backend and namespace of `s` whose claim blocks a run as poison at its
/// first takeover.
async fn poisoning(s: &ScriptStore) -> ScriptStore {
    let cfg = StoreConfig {
        max_crashes: 1,
        ..s.config().clone()
    };
    reconfigured(s, cfg).await
}

/// A store on the backend and namespace of `s` with the settings `cfg`.
async fn reconfigured(s: &ScriptStore, cfg: StoreConfig) -> ScriptStore {
    #[cfg(feature = "services")]
    if s.mem_engine().is_none() {
        let url = savepoint_integration_tests::services().await.redis_url.clone();
        return ScriptStore::connect(&url, s.keys().clone(), cfg).await.expect("redis");
    }
    let engine = s.mem_engine().expect("an embedded store").clone();
    ScriptStore::embedded(engine, s.keys().clone(), cfg)
}

/// A suspend by a worker with sticky queues names it as the run's holder (`held`); the scanner
/// names the holder on the run's first ring since its last claim only (a task in a sticky
/// queue does not mark the run queued, so a second ring means the holder did not take it, and
/// goes to the task queue: one extra task per run at most), a running run names none, and a
/// suspend by a worker without sticky queues takes the name away.
async fn a_runs_holder_is_named_on_its_first_ring_only(s: ScriptStore) {
    let cfg = StoreConfig {
        sticky: true,
        ..s.config().clone()
    };
    let sticky = reconfigured(&s, cfg).await;
    let t = new_run(&s, json!(null)).await;
    let mut c = claim(&sticky, &t, "w-sticky").await;
    sticky
        .suspend(&mut c.lease, None, sleeping(Duration::from_millis(1)), ("slept", ""))
        .await
        .unwrap();
    assert_eq!(s.run_route(&t).await.unwrap(), (None, Some("w-sticky".to_owned())));
    let p = s.keys().partition(&t);
    let mut holders = Vec::new();
    for _ in 0..2 {
        tokio::time::sleep(Duration::from_millis(20)).await;
        let (_, rung) = s.scan_due(p, 100, Duration::from_millis(1)).await.unwrap();
        let r = rung.into_iter().find(|r| r.thread == t).expect("the run is rung");
        holders.push(r.holder);
    }
    assert_eq!(
        holders,
        [Some("w-sticky".to_owned()), None],
        "first ring sticky, second to the queue"
    );
    let mut c = claim(&s, &t, "w-plain").await;
    assert_eq!(s.run_route(&t).await.unwrap().1, None, "a running run names no holder");
    s.suspend(&mut c.lease, None, sleeping(Duration::from_millis(1)), ("slept", ""))
        .await
        .unwrap();
    assert_eq!(
        s.run_route(&t).await.unwrap().1,
        None,
        "a plain worker's suspend takes it away"
    );
}

/// A block records its kind (`bk`) with its reason, and what makes the run runnable again
/// (retry, restart) or cancels it takes the kind away with the reason; the claim's poison
/// block records `poison`.
async fn a_block_records_its_kind_and_unblocking_clears_it(s: ScriptStore) {
    let t = new_run(&s, json!(null)).await;
    block_as(&s, &t, BlockKind::Panic).await;
    assert_eq!(stored_block_kind(&s, &t).await.as_deref(), Some("panic"));
    let h = s.header(&t).await.unwrap().unwrap();
    assert_eq!((h.status, h.block_kind), (RunStatus::Blocked, Some(BlockKind::Panic)));
    assert!(matches!(s.retry(&t, "fixed").await.unwrap(), RetryOutcome::Queued(_)));
    assert_eq!(stored_block_kind(&s, &t).await, None);
    let h = s.header(&t).await.unwrap().unwrap();
    assert_eq!((h.status, h.reason, h.block_kind), (RunStatus::Pending, None, None));
    // Blocked again (another kind), then cancelled: the reason is the cancel's, with no kind.
    block_as(&s, &t, BlockKind::NonDeterminism).await;
    assert_eq!(stored_block_kind(&s, &t).await.as_deref(), Some("non_determinism"));
    assert!(s.cancel(&t, "operator").await.unwrap().is_ok());
    assert_eq!(stored_block_kind(&s, &t).await, None);
    // The claim blocks a run as poison; a restart clears the kind.
    let p = poisoning(&s).await;
    let t = new_run(&p, json!(null)).await;
    claim(&p, &t, "w1").await;
    tokio::time::sleep(p.config().lease + Duration::from_millis(100)).await;
    let poisoned = p.claim(&t, "w2", None, &ServedSpec::any()).await.unwrap();
    assert!(matches!(poisoned, ClaimOutcome::Poison(_)), "{poisoned:?}");
    let h = p.header(&t).await.unwrap().unwrap();
    assert_eq!((h.status, h.block_kind), (RunStatus::Blocked, Some(BlockKind::Poison)));
    assert!(matches!(
        p.restart(&t, 0, "fixed").await.unwrap(),
        RestartOutcome::Queued(_, RunStatus::Blocked)
    ));
    assert_eq!(stored_block_kind(&p, &t).await, None);
    assert_eq!(p.header(&t).await.unwrap().unwrap().block_kind, None);
}

/// A claim by a worker holding `held` entries of the run's journal.
async fn claim_holding(s: &ScriptStore, t: &ThreadId, held: Option<JournalHeld>) -> savepoint_store::Claimed {
    match s.claim_holding(t, "w", None, &ServedSpec::any(), held).await.unwrap() {
        ClaimOutcome::Claimed(c) => *c,
        other => panic!("expected a claim, got {other:?}"),
    }
}

/// Yields the claimed run (pending again) with `entries` appended at `first`.
async fn yield_with(s: &ScriptStore, c: &mut savepoint_store::Claimed, first: u32, entries: &[Entry]) {
    let how = Suspend::until(RunStatus::Pending, Duration::ZERO);
    s.suspend(&mut c.lease, Some((first, entries)), how, ("yielded", ""))
        .await
        .unwrap();
}

async fn a_claim_by_a_worker_holding_the_journal_reads_only_what_is_new(s: ScriptStore) {
    let t = new_run(&s, json!({"in": 1})).await;
    let mut c = claim_holding(&s, &t, None).await;
    assert_eq!(c.journal_from, None);
    let first: Vec<Entry> = (0..3).map(|i| entry(&format!("s{i}"))).collect();
    yield_with(&s, &mut c, 0, &first).await;
    let held = JournalHeld::of(&c.header, 3);
    // Holding three entries: the claim repeats the last (index 2) and has nothing newer.
    let mut c = claim_holding(&s, &t, Some(held)).await;
    assert_eq!(c.journal_from, Some(2));
    assert_eq!(c.journal.as_ref().unwrap(), &first[2..]);
    assert_eq!(c.header.steps, 3);
    assert_eq!(c.header.input, json!({"in": 1}), "the header is whole");
    let more: Vec<Entry> = (3..5).map(|i| entry(&format!("s{i}"))).collect();
    yield_with(&s, &mut c, 3, &more).await;
    let c = claim_holding(&s, &t, Some(held)).await;
    assert_eq!(c.journal_from, Some(2));
    let mut want = vec![first[2].clone()];
    want.extend(more.iter().cloned());
    assert_eq!(c.journal.as_ref().unwrap(), &want);
    // Claimed again (the lease ran out): a worker that holds nothing, or more than the run
    // has, or holds it from before a restart or from another run created under the id, reads
    // the whole journal.
    tokio::time::sleep(s.config().lease + Duration::from_millis(100)).await;
    for other in [
        None,
        Some(JournalHeld { entries: 6, ..held }),
        Some(JournalHeld { restarts: 1, ..held }),
        Some(JournalHeld {
            created: held.created + 1,
            ..held
        }),
        Some(JournalHeld { entries: 0, ..held }),
    ] {
        let mut c = claim_holding(&s, &t, other).await;
        assert_eq!(c.journal_from, None, "{other:?}");
        assert_eq!(c.journal.as_ref().unwrap().len(), 5, "{other:?}");
        yield_with(&s, &mut c, 5, &[]).await;
    }
    // A restart drops entries: what was held before it is refused.
    let mut c = claim_holding(&s, &t, None).await;
    s.finish(&mut c.lease, None, Finish::Failed("x"), ("failed", "x"))
        .await
        .unwrap();
    assert!(matches!(
        s.restart(&t, 2, "again").await.unwrap(),
        RestartOutcome::Queued(..)
    ));
    let mut c = claim_holding(&s, &t, Some(held)).await;
    assert_eq!(c.journal_from, None);
    assert_eq!(c.journal.as_ref().unwrap().len(), 2);
    let after = JournalHeld::of(&c.header, 2);
    assert_eq!(after.restarts, 1);
    yield_with(&s, &mut c, 2, &[]).await;
    assert_eq!(claim_holding(&s, &t, Some(after)).await.journal_from, Some(1));
}

async fn a_claim_reads_the_whole_hash_while_calls_keep_bookkeeping(s: ScriptStore) {
    let t = new_run(&s, json!(null)).await;
    let mut c = claim_holding(&s, &t, None).await;
    yield_with(&s, &mut c, 0, &[entry("s0")]).await;
    let held = JournalHeld::of(&c.header, 1);
    let mut c = claim_holding(&s, &t, Some(held)).await;
    // A failed attempt of the next call is recorded beside the journal (`t:1`): the
    // claim must hand it over, so it reads the whole hash.
    s.retried(&c.lease, 1, 2, "1 s1", None).await.unwrap();
    yield_with(&s, &mut c, 1, &[]).await;
    let c = claim_holding(&s, &t, Some(held)).await;
    assert_eq!(c.journal_from, None);
    assert_eq!(c.tries.get(&1), Some(&2));
}

fn sleeping(due_in: Duration) -> Suspend<'static> {
    Suspend {
        status: RunStatus::Sleeping,
        due_in: Some(due_in),
        wait: None,
        backoff_on: None,
        drop_begin: None,
        queue: None,
    }
}

async fn a_paused_workflow_stops_its_runs_at_the_claim_and_a_resume_puts_them_back(s: ScriptStore) {
    let t = new_run(&s, json!(1)).await;
    let other = ThreadId::generate("st");
    s.create(&other, "other", 1, "2", "").await.unwrap();
    // A slice in flight when the pause lands: its heartbeat says so.
    let running = new_run(&s, json!(3)).await;
    let r = claim(&s, &running, "w").await;
    assert_eq!(s.heartbeat(&r.lease).await.unwrap().1, None);
    let scope = PauseScope::Workflow("wf".into());
    assert_eq!(
        s.pause(&scope, &PauseRecord::new("ops", "provider down", false))
            .await
            .unwrap(),
        None
    );
    let beat = s
        .heartbeat(&r.lease)
        .await
        .unwrap()
        .1
        .expect("the heartbeat names the pause");
    assert!(beat.contains("workflow wf paused by ops: provider down"), "{beat}");
    // Its claims stop it: status paused, the status it had kept, out of the due set.
    assert!(matches!(
        s.claim(&t, "w", None, &ServedSpec::any()).await.unwrap(),
        ClaimOutcome::Paused(f) if f == "w:wf"
    ));
    let h = s.header(&t).await.unwrap().unwrap();
    assert_eq!(h.status, RunStatus::Paused);
    let (field, record, from) = h.paused_by.clone().unwrap();
    assert_eq!((field.as_str(), from), ("w:wf", RunStatus::Pending));
    assert_eq!(PauseRecord::decode(&record).unwrap().note, "provider down");
    assert!(matches!(
        s.claim(&t, "w", None, &ServedSpec::any()).await.unwrap(),
        ClaimOutcome::Paused(f) if f.is_empty()
    ));
    let p = s.keys().partition(&t);
    let (_, rung) = s.scan_due(p, 100, Duration::from_secs(5)).await.unwrap();
    assert!(!rung.iter().any(|r| r.thread == t), "a stopped run is never rung");
    assert_eq!(s.paused_count().await.unwrap(), 1);
    let listed = s.pauses().await.unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(
        (listed[0].scope.clone(), listed[0].record.by.as_str()),
        (scope.clone(), "ops")
    );
    assert!(listed[0].record.at > 0, "stamped with the server's time");
    // Another workflow runs on.
    claim(&s, &other, "w").await;
    // Pausing again replaces the record; resuming puts the run back, once.
    let again = s.pause(&scope, &PauseRecord::new("ops2", "", false)).await.unwrap();
    assert_eq!(again.map(|r| r.by), Some("ops".to_owned()));
    let (_, back) = s.resume(&scope, "resumed by ops", None).await.unwrap().unwrap();
    assert_eq!((back.resumed, back.still_held), (1, 0));
    assert_eq!(s.resume(&scope, "again", None).await.unwrap(), None);
    let h = s.header(&t).await.unwrap().unwrap();
    assert_eq!((h.status, h.paused_by), (RunStatus::Pending, None));
    assert_eq!(s.paused_count().await.unwrap(), 0);
    let ev = s.events(&t, 50).await.unwrap();
    assert!(ev.iter().any(|e| e.typ == "paused"), "{ev:?}");
    assert!(
        ev.iter().any(|e| e.typ == "unpaused" && e.detail == "resumed by ops"),
        "{ev:?}"
    );
    claim(&s, &t, "w").await;
}

async fn a_run_pause_keeps_its_answers_and_yields_to_a_wider_pause(s: ScriptStore) {
    let t = new_run(&s, json!(null)).await;
    let mut c = claim(&s, &t, "w").await;
    let wait = Wait {
        kind: "signal".into(),
        name: "go".into(),
        payload: json!(null),
    };
    let how = Suspend {
        status: RunStatus::Waiting,
        due_in: None,
        wait: Some(&wait),
        backoff_on: None,
        drop_begin: None,
        queue: None,
    };
    s.suspend(&mut c.lease, None, how, ("waiting", "go")).await.unwrap();
    let rec = PauseRecord::new("alice", "look first", false);
    assert_eq!(
        s.pause_run(&t, &rec).await.unwrap(),
        RunPaused::Paused(RunStatus::Waiting)
    );
    assert!(matches!(s.pause_run(&t, &rec).await.unwrap(), RunPaused::Already(r) if r.by == "alice"));
    // The answer it waited for is taken and kept; the claim it brings stops the run.
    assert!(matches!(
        s.signal(&t, "signal", "go", &json!(7), None).await.unwrap(),
        SignalOutcome::Woke(_)
    ));
    assert!(matches!(
        s.claim(&t, "w", None, &ServedSpec::any()).await.unwrap(),
        ClaimOutcome::Paused(f) if f == "run"
    ));
    // A workflow pause on top: unpausing the run lifts its own pause only.
    let scope = PauseScope::Version("wf".into(), 1);
    s.pause(&scope, &PauseRecord::new("ops", "", false)).await.unwrap();
    assert!(matches!(
        s.resume_run(&t, "resumed by alice", None).await.unwrap(),
        RunResumed::Held(f, r) if f == "v:wf@1" && r.by == "ops"
    ));
    assert_eq!(s.header(&t).await.unwrap().unwrap().status, RunStatus::Paused);
    assert!(matches!(
        s.resume_run(&t, "x", None).await.unwrap(),
        RunResumed::NotOwn(..)
    ));
    // Lifting the version pause puts it back, on version 2 as asked, with its signal.
    let (_, back) = s
        .resume(&scope, "resumed by ops", Some(("wf", 2)))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(back.resumed, 1);
    let c = claim(&s, &t, "w").await;
    assert_eq!(c.header.workflow_version, 2);
    assert!(c.signals.keys().any(|k| k.starts_with("s:go:")), "{:?}", c.signals);
    // Ended runs are not paused; a run with no pause is not unpaused.
    let done = new_run(&s, json!(null)).await;
    let mut d = claim(&s, &done, "w").await;
    s.finish(
        &mut d.lease,
        None,
        Finish::Completed(&json!(1), None),
        ("completed", ""),
    )
    .await
    .unwrap();
    assert_eq!(
        s.pause_run(&done, &rec).await.unwrap(),
        RunPaused::Terminal(RunStatus::Completed)
    );
    assert_eq!(
        s.resume_run(&t, "x", None).await.unwrap(),
        RunResumed::NotPaused(RunStatus::Running)
    );
    assert_eq!(
        s.pause_run(&ThreadId::generate("none"), &rec).await.unwrap(),
        RunPaused::Missing
    );
}

async fn a_pause_that_holds_timers_moves_a_stopped_timer_by_its_length(s: ScriptStore) {
    let sleep = Entry::new("nap", EntryKind::Sleep, Outcome::Ok(json!({})), 1);
    let (held, kept) = (new_run(&s, json!(1)).await, ThreadId::generate("st"));
    s.create(&kept, "kept", 1, "2", "").await.unwrap();
    for t in [&held, &kept] {
        let mut c = claim(&s, t, "w").await;
        let nap = Some((0, std::slice::from_ref(&sleep)));
        s.suspend(
            &mut c.lease,
            nap,
            sleeping(Duration::from_millis(100)),
            ("slept", "nap"),
        )
        .await
        .unwrap();
    }
    let (a, b) = (PauseScope::Workflow("wf".into()), PauseScope::Workflow("kept".into()));
    s.pause(&a, &PauseRecord::new("ops", "", true)).await.unwrap();
    s.pause(&b, &PauseRecord::new("ops", "", false)).await.unwrap();
    tokio::time::sleep(Duration::from_millis(150)).await;
    for t in [&held, &kept] {
        assert!(matches!(
            s.claim(t, "w", None, &ServedSpec::any()).await.unwrap(),
            ClaimOutcome::Paused(_)
        ));
    }
    tokio::time::sleep(Duration::from_millis(1000)).await;
    s.resume(&a, "r", None).await.unwrap().unwrap();
    s.resume(&b, "r", None).await.unwrap().unwrap();
    // Kept: the timer came due while paused, so it fires now. Held: ~1 s of its 100 ms nap
    // was spent paused; about 100 ms of it is left.
    claim(&s, &kept, "w").await;
    let h = s.header(&held).await.unwrap().unwrap();
    assert_eq!(h.status, RunStatus::Sleeping);
    assert!(matches!(
        s.claim(&held, "w", None, &ServedSpec::any()).await.unwrap(),
        ClaimOutcome::NotDue(_)
    ));
    tokio::time::sleep(Duration::from_millis(300)).await;
    claim(&s, &held, "w").await;
}

async fn the_pause_sweep_repairs_copies_and_puts_back_what_no_pause_holds(s: ScriptStore) {
    let t = new_run(&s, json!(null)).await;
    let scope = PauseScope::Queue {
        name: "tasks".into(),
        default: true,
    };
    let p = s.keys().partition(&t);
    let copies = s.keys().pauses(p);
    let hdel = |key: String, field: &'static str| redis::cmd("HDEL").arg(key).arg(field).clone();
    s.pause(&scope, &PauseRecord::new("ops", "", false)).await.unwrap();
    // A pause whose caller died after the catalog and before this partition's copy.
    for f in ["q:", "q:tasks"] {
        let _: u64 = s.query(&hdel(copies.clone(), f)).await.unwrap();
    }
    let catalog = s.pauses().await.unwrap();
    assert_eq!(
        s.pause_sweep(p, &catalog, Some("tasks"), None).await.unwrap().0.resumed,
        0
    );
    assert!(matches!(
        s.claim(&t, "w", None, &ServedSpec::any()).await.unwrap(),
        ClaimOutcome::Paused(f) if f == "q:"
    ));
    // A lift whose caller died after the copies and the catalog, before the put-back.
    for f in ["q:", "q:tasks"] {
        let _: u64 = s.query(&hdel(copies.clone(), f)).await.unwrap();
    }
    let _: u64 = s.query(&hdel(s.keys().pause_catalog(), "q:tasks")).await.unwrap();
    assert_eq!(s.pause_sweep(p, &[], Some("tasks"), None).await.unwrap().0.resumed, 1);
    assert_eq!(s.header(&t).await.unwrap().unwrap().status, RunStatus::Pending);
    // A copy the catalog no longer has (a pause and a resume raced) is removed.
    s.pause(&scope, &PauseRecord::new("ops", "", false)).await.unwrap();
    let _: u64 = s.query(&hdel(s.keys().pause_catalog(), "q:tasks")).await.unwrap();
    s.pause_sweep(p, &[], Some("tasks"), None).await.unwrap();
    claim(&s, &t, "w").await;
}

/// A flow key's state lives only as long as it says something (issue 49: one hash per
/// customer forever with `key_from`): the rate bucket until it would have filled again, the
/// slots and their holders until the latest slot's lease (and grace) passes, the line and its
/// last-seen times while waiting runs are seen; a heartbeat's extension moves the slots' expiry.
async fn a_flow_keys_state_expires_once_it_says_nothing(s: ScriptStore) {
    let flow = Flow {
        key: "wf:expiry".into(),
        limit: 1,
        rate: Some(2.0),
    };
    let (a, b) = (new_run(&s, json!({"n": 1})).await, new_run(&s, json!({"n": 2})).await);
    assert_eq!(s.flow_acquire(&flow, &a, 1, 0, true).await.unwrap(), Acquired::Slot);
    let name = s.flow_name(&flow.key).await.unwrap();
    let k = s.keys();
    let pttl = |key: String| {
        let s = s.clone();
        async move { s.query::<i64>(redis::cmd("PTTL").arg(key)).await.unwrap() }
    };
    let slot = (s.config().lease + s.config().grace).as_millis() as i64;
    // The bucket had 2 tokens and spent one: full again in 500 ms.
    let bucket = pttl(k.flow_rate(&name)).await;
    assert!((1..=1_500).contains(&bucket), "rate bucket PTTL {bucket}");
    for key in [k.flow_slots(&name), k.flow_holders(&name)] {
        let ttl = pttl(key.clone()).await;
        assert!(
            (slot - 200..=slot + 1_000).contains(&ttl),
            "{key}: PTTL {ttl}, slot {slot}"
        );
    }
    // B waits in line: the line and its last-seen times expire.
    assert!(matches!(
        s.flow_acquire(&flow, &b, 1, 0, true).await.unwrap(),
        Acquired::Full(1)
    ));
    for key in [k.flow_wait(&name), k.flow_seen(&name)] {
        let ttl = pttl(key.clone()).await;
        assert!(ttl > 0, "{key}: PTTL {ttl}");
    }
    // A heartbeat moves the slots' expiry with the slot.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let before = pttl(k.flow_slots(&name)).await;
    assert!(s.flow_extend(&flow, &a, 1).await.unwrap());
    let after = pttl(k.flow_slots(&name)).await;
    assert!(after > before + 200, "extended: {before} -> {after}");
    // A rate so low its bucket would not fill for years: kept, as before (the reviewer's
    // 1e-15 per second made PEXPIRE refuse `1e+20` and the start fail, again and again).
    let slow = Flow {
        key: "wf:slow".into(),
        limit: 1,
        rate: Some(1e-15),
    };
    let c = new_run(&s, json!({"n": 3})).await;
    assert_eq!(s.flow_acquire(&slow, &c, 1, 0, true).await.unwrap(), Acquired::Slot);
    let slow_name = s.flow_name(&slow.key).await.unwrap();
    assert_eq!(pttl(k.flow_rate(&slow_name)).await, -1);
}

/// A signal's client id deduplicates it, kept beside the signals hash and not in it: a claim
/// reads the signals hash, and carried every id the run was ever given (issue 49: a parent
/// with 100k children, 100k fields a slice). The ids live a retention past the last one, and
/// an id an older build kept in the signals hash (`d:<id>`) still deduplicates.
async fn signal_ids_deduplicate_beside_the_signals_a_claim_reads(s: ScriptStore) {
    let t = new_run(&s, json!({})).await;
    let v = json!(1);
    assert!(matches!(
        s.signal(&t, "signal", "go", &v, Some("id-1")).await.unwrap(),
        SignalOutcome::Buffered
    ));
    assert!(matches!(
        s.signal(&t, "signal", "go", &v, Some("id-1")).await.unwrap(),
        SignalOutcome::Duplicate
    ));
    let k = s.keys().run(&t);
    let fields: Vec<String> = s.query(redis::cmd("HKEYS").arg(&k.signals)).await.unwrap();
    assert!(fields.iter().all(|f| !f.starts_with("d:")), "{fields:?}");
    assert_eq!(
        fields.iter().filter(|f| f.starts_with("s:go:")).count(),
        1,
        "{fields:?}"
    );
    let ttl: i64 = s.query(redis::cmd("PTTL").arg(k.dedup())).await.unwrap();
    let retention = s.config().retention.as_millis() as i64;
    assert!((retention - 60_000..=retention).contains(&ttl), "ids' PTTL {ttl}");
    // An id an older build kept in the signals hash.
    let _: i64 = s
        .query(redis::cmd("HSET").arg(&k.signals).arg("d:old-id").arg("go"))
        .await
        .unwrap();
    assert!(matches!(
        s.signal(&t, "signal", "go", &v, Some("old-id")).await.unwrap(),
        SignalOutcome::Duplicate
    ));
}

/// A run's place in a flow key's line (`flow_line`, read-only), the key's turnover moved by
/// each slot given back, and a failed call's back-off kept in the run (`rb`) for its waiting
/// cause.
async fn a_flow_line_says_where_a_run_stands_and_how_fast_slots_turn(s: ScriptStore) {
    let flow = Flow {
        key: "wf:line".into(),
        limit: 1,
        rate: None,
    };
    let (a, b, c) = (
        new_run(&s, json!({"n": 1})).await,
        new_run(&s, json!({"n": 2})).await,
        new_run(&s, json!({"n": 3})).await,
    );
    assert_eq!(s.flow_acquire(&flow, &a, 1, 0, true).await.unwrap(), Acquired::Slot);
    assert!(matches!(
        s.flow_acquire(&flow, &b, 1, 0, true).await.unwrap(),
        Acquired::Full(1)
    ));
    // (In line by arrival: a later millisecond.)
    tokio::time::sleep(Duration::from_millis(3)).await;
    assert!(matches!(
        s.flow_acquire(&flow, &c, 1, 0, true).await.unwrap(),
        Acquired::Full(1)
    ));
    let line = s.flow_line(&flow, &c).await.unwrap();
    assert_eq!((line.rank, line.in_line, line.holders), (Some(1), 2, 1), "{line:?}");
    assert_eq!((line.last_release_at, line.turnover_ms), (None, None));
    assert_eq!(
        s.flow_line(&flow, &a).await.unwrap().rank,
        None,
        "the holder is not in line"
    );
    // Two slots given back: the second measures the gap.
    s.flow_release(&flow, &a, Some(1), true).await.unwrap();
    let line = s.flow_line(&flow, &c).await.unwrap();
    assert!(line.last_release_at.is_some() && line.turnover_ms.is_none(), "{line:?}");
    assert_eq!(s.flow_acquire(&flow, &b, 2, 0, true).await.unwrap(), Acquired::Slot);
    tokio::time::sleep(Duration::from_millis(30)).await;
    s.flow_release(&flow, &b, Some(2), true).await.unwrap();
    let line = s.flow_line(&flow, &c).await.unwrap();
    assert_eq!((line.rank, line.holders), (Some(0), 0), "{line:?}");
    assert!(line.turnover_ms.is_some_and(|g| g >= 25), "{line:?}");
    // The turnover outlives its last release by an hour, not for ever.
    let turn = s.keys().flow_turn(&s.flow_name(&flow.key).await.unwrap());
    let ttl: i64 = s.query(redis::cmd("PTTL").arg(turn)).await.unwrap();
    assert!((3_500_000..=3_600_000).contains(&ttl), "{ttl}");
    // A failed call's back-off.
    let cl = claim(&s, &a, "w").await;
    s.retried(&cl.lease, 0, 1, "s0 attempt 1", Some(Duration::from_secs(20)))
        .await
        .unwrap();
    let h = s.header(&a).await.unwrap().unwrap();
    let b = h.retry_backoff.expect("the back-off is kept");
    assert_eq!((b.index, b.attempt), (0, 1));
    assert!(b.until >= line.now + 19_000, "{b:?}");
}

/// Each contract test, once per backend.
macro_rules! conformance {
    ($($name:ident),* $(,)?) => {
        #[cfg(feature = "services")]
        mod on_redis {
            $(
                #[tokio::test]
                async fn $name() {
                    super::$name(super::redis_store().await).await
                }
            )*
        }
        mod on_embedded {
            $(
                #[tokio::test]
                async fn $name() {
                    super::$name(super::embedded_store()).await
                }
            )*
        }
    };
}

conformance!(
    create_is_idempotent_on_thread_workflow_and_input,
    claim_outcomes_and_fenced_commits,
    sleeping_waiting_and_signals,
    finish_cancel_unblock_and_retention,
    scan_due_hands_each_run_out_once_per_period,
    a_task_published_before_a_suspend_does_not_delay_the_wake_up,
    a_task_for_a_leased_run_does_not_push_its_safety_net_out,
    effect_records_intent_done_release,
    a_done_record_lives_until_its_owner_journals_it_or_ends,
    rejected_answers_and_reopened_results,
    orphaned_intents_and_operator_settlement,
    a_run_that_needs_a_feature_the_worker_does_not_know_is_given_back_untouched,
    an_unused_intent_recorded_by_its_holder_is_not_blocked_on,
    a_block_records_its_kind_and_unblocking_clears_it,
    a_claim_by_a_worker_holding_the_journal_reads_only_what_is_new,
    a_claim_reads_the_whole_hash_while_calls_keep_bookkeeping,
    a_paused_workflow_stops_its_runs_at_the_claim_and_a_resume_puts_them_back,
    a_run_pause_keeps_its_answers_and_yields_to_a_wider_pause,
    a_pause_that_holds_timers_moves_a_stopped_timer_by_its_length,
    the_pause_sweep_repairs_copies_and_puts_back_what_no_pause_holds,
    a_flow_line_says_where_a_run_stands_and_how_fast_slots_turn,
    a_flow_keys_state_expires_once_it_says_nothing,
    signal_ids_deduplicate_beside_the_signals_a_claim_reads,
    a_runs_holder_is_named_on_its_first_ring_only,
);
