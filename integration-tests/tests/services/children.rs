//! Child workflows (issue 10): `ctx.child` and `ctx.start_child` across real worker processes
//! against the real services. A worker is SIGKILLed at each child failpoint; each child runs
//! once (its effect is at the provider, the demo effects log, exactly once) and the parent
//! gets every output. Cancel reaches down (parent → children) and up (a cancelled child's
//! parent gets the error).

use serde_json::{json, Value};
use std::time::Duration;

use savepoint_core::ids::ThreadId;
use savepoint_integration_tests::cleanup;
use savepoint_integration_tests::procs::killed_by_signal;
use savepoint_integration_tests::scenario::World;

const WORKER: &str = env!("CARGO_BIN_EXE_it-worker");
const LONG: Duration = Duration::from_secs(40);

fn child_of(parent: &ThreadId, index: u64) -> ThreadId {
    ThreadId::new(format!("{parent}.c{index}")).unwrap()
}

async fn world(prefix: &str) -> World {
    // A parent whose child's word was lost finds out at its poll: 1 s here.
    World::new(prefix, |c| c.child_poll_ms = 1000).await
}

/// Every child of `parent` completed once, its effect applied once, and the parent holds
/// their outputs in order.
async fn assert_family_done(w: &World, parent: &ThreadId, kids: u64) {
    let run = w.wait_status(parent, &["completed", "failed", "blocked"], LONG).await;
    assert_eq!(run["status"], "completed", "{run}");
    let (_, out) = w.get(&format!("/v1/runs/{parent}/result")).await;
    let output = if out["output"].is_null() {
        run["output"].clone()
    } else {
        out["output"].clone()
    };
    let expected: Vec<Value> = (0..kids).map(|n| json!({"n": n, "doubled": 2 * n})).collect();
    assert_eq!(output["children"], json!(expected), "{run} {out}");
    assert_eq!(run["children"].as_array().map(Vec::len), Some(kids as usize), "{run}");
    let counts = w.effect_counts().await;
    for n in 0..kids {
        let child = child_of(parent, n);
        let c = w.run(&child).await;
        assert_eq!(c["status"], "completed", "{c}");
        assert_eq!(c["parent"]["thread_id"], parent.as_str(), "{c}");
        assert_eq!(counts.get(&format!("gift:{child}")), Some(&1), "{counts:?}");
        let created = w.event_types(&child).await.iter().filter(|e| *e == "created").count();
        assert_eq!(created, 1, "child {child} was created once");
    }
    // No other child was started (a second start would have a new id and its own effect).
    let gifts = counts
        .keys()
        .filter(|k| k.starts_with(&format!("gift:{parent}.")))
        .count();
    assert_eq!(gifts, kids as usize, "{counts:?}");
}

#[tokio::test]
async fn a_parent_with_three_children_survives_a_sigkill_at_each_child_failpoint() {
    let w = world("kids").await;
    for fp in ["child.before_start", "child.after_start", "child.before_notify"] {
        // The second hit kills: one child has gone through that point already.
        let mut victim = w.worker(WORKER, "victim", &format!("{fp}=kill@2"));
        w.wait_registered("family").await;
        let parent = w.start("family", json!({"kids": 3})).await;
        let status = victim.wait_exit(LONG).await;
        assert!(killed_by_signal(&status), "{fp}: {status:?}");
        let mut heir = w.worker(WORKER, "heir", "");
        assert_family_done(&w, &parent, 3).await;
        let types = w.event_types(&parent).await;
        assert_eq!(
            types.iter().filter(|e| *e == "child_started").count(),
            3,
            "{fp}: each child is linked once: {types:?}"
        );
        assert_eq!(
            types.iter().filter(|e| *e == "child_returned").count(),
            3,
            "{fp}: {types:?}"
        );
        heir.signal("TERM");
        heir.wait_exit(Duration::from_secs(30)).await;
    }
    cleanup(&w.cfg).await;
}

#[tokio::test]
async fn start_and_forget_children_run_once_and_the_parent_goes_on() {
    let w = world("kidsfree").await;
    let mut wk = w.worker(WORKER, "w1", "");
    w.wait_registered("family").await;
    let parent = w.start("family", json!({"kids": 1, "detached": 2})).await;
    let run = w.wait_status(&parent, &["completed", "failed"], LONG).await;
    assert_eq!(run["status"], "completed", "{run}");
    let ids: Vec<ThreadId> = run["output"]["detached"]
        .as_array()
        .expect("detached ids")
        .iter()
        .map(|v| ThreadId::new(v.as_str().unwrap().to_owned()).unwrap())
        .collect();
    assert_eq!(ids, vec![child_of(&parent, 1), child_of(&parent, 2)], "{run}");
    for t in &ids {
        let c = w.wait_status(t, &["completed", "failed"], LONG).await;
        assert_eq!(c["status"], "completed", "{c}");
    }
    let counts = w.effect_counts().await;
    for t in ids.iter().chain([&child_of(&parent, 0)]) {
        assert_eq!(counts.get(&format!("gift:{t}")), Some(&1), "{counts:?}");
    }
    wk.signal("TERM");
    wk.wait_exit(Duration::from_secs(30)).await;
    cleanup(&w.cfg).await;
}

#[tokio::test]
async fn cancelling_a_parent_cancels_its_waiting_child() {
    let w = world("kidscancel").await;
    let mut wk = w.worker(WORKER, "w1", "");
    w.wait_registered("family").await;
    let parent = w.start("family", json!({"kids": 2, "hold": true})).await;
    let child = child_of(&parent, 0);
    w.wait_status(&parent, &["waiting"], LONG).await;
    let c = w.wait_status(&child, &["waiting"], LONG).await;
    assert_eq!(c["wait"]["kind"], "signal", "{c}");
    let run = w.run(&parent).await;
    assert_eq!(run["wait"]["kind"], "child", "{run}");
    let (code, body) = w
        .post(&format!("/v1/runs/{parent}/cancel"), json!({"reason": "test"}))
        .await;
    assert_eq!(code, 200, "{body}");
    assert_eq!(body["children_cancelled"], json!([child.as_str()]), "{body}");
    let c = w.run(&child).await;
    assert_eq!(c["status"], "cancelled", "{c}");
    assert!(
        c["cancel_reason"]
            .as_str()
            .unwrap_or_default()
            .contains(parent.as_str()),
        "{c}"
    );
    // The second child was never started; nothing was applied.
    assert!(w.store.header(&child_of(&parent, 1)).await.unwrap().is_none());
    assert!(w.effect_counts().await.is_empty());
    wk.signal("TERM");
    wk.wait_exit(Duration::from_secs(30)).await;
    cleanup(&w.cfg).await;
}

#[tokio::test]
async fn a_cancelled_child_is_an_error_the_parent_sees_at_once() {
    let w = world("kidsup").await;
    let mut wk = w.worker(WORKER, "w1", "");
    w.wait_registered("family").await;
    let parent = w.start("family", json!({"kids": 1, "hold": true})).await;
    let child = child_of(&parent, 0);
    // (The parent waits once its child exists.)
    w.wait_status(&parent, &["waiting"], LONG).await;
    w.wait_status(&child, &["waiting"], LONG).await;
    let (code, body) = w
        .post(&format!("/v1/runs/{child}/cancel"), json!({"reason": "no gift"}))
        .await;
    assert_eq!(code, 200, "{body}");
    // Woken by the child's word (the API publishes its task), well before any poll would.
    let run = w
        .wait_status(&parent, &["failed", "completed"], Duration::from_secs(10))
        .await;
    assert_eq!(run["status"], "failed", "{run}");
    let error = run["error"].as_str().unwrap_or_default();
    assert!(
        error.contains(&format!("child run {child} was cancelled: no gift")),
        "{run}"
    );
    let (_, hist) = w.get(&format!("/v1/runs/{parent}/history")).await;
    let entry = &hist["entries"][0];
    assert_eq!(entry["kind"], "child", "{hist}");
    wk.signal("TERM");
    wk.wait_exit(Duration::from_secs(30)).await;
    cleanup(&w.cfg).await;
}

/// The fields of a run's signals hash (buffered signals, answers, child words).
async fn signal_fields(w: &World, t: &ThreadId) -> Vec<String> {
    let k = w.store.keys().run(t);
    w.store
        .query(redis::cmd("HKEYS").arg(&k.signals))
        .await
        .expect("signals")
}

/// The client ids of what `t` was given (kept beside its signals hash).
async fn given_ids(w: &World, t: &ThreadId) -> Vec<String> {
    let k = w.store.keys().run(t);
    w.store
        .query(redis::cmd("HKEYS").arg(k.dedup()))
        .await
        .expect("client ids")
}

/// Issue 24, hole 4: every child tells its parent when it ends, but only an awaited
/// `ctx.child` consumed the word, so each start-and-forget child left one buffered in its
/// parent for good (until the buffered-signal cap refused every signal to it). A word whose
/// call is already journaled is not kept now, and the journaling of a child call drops any
/// word for it.
#[tokio::test]
async fn words_of_children_nobody_awaits_are_not_kept_in_the_parent() {
    let w = world("kidswords").await;
    let mut wk = w.worker(WORKER, "w1", "");
    w.wait_registered("family").await;
    let parent = w.start("family", json!({"kids": 1, "detached": 3, "wait": true})).await;
    // (It waits for its awaited child first, then for the signal.)
    w.wait_waiting_for(&parent, "done", LONG).await;
    // Every child ended (so each has told its parent).
    for i in 0..4 {
        let c = w
            .wait_status(&child_of(&parent, i), &["completed", "failed"], LONG)
            .await;
        assert_eq!(c["status"], "completed", "{c}");
        let told = w.event_types(&child_of(&parent, i)).await;
        assert!(told.iter().any(|e| e == "completed"), "{told:?}");
    }
    // Each child's worker tells the parent after the child's finish: wait until all four
    // words were delivered (each leaves its client id, child:<id>, beside the signals hash),
    // then look at what the parent keeps.
    let deadline = std::time::Instant::now() + LONG;
    loop {
        let fields = signal_fields(&w, &parent).await;
        let ids = given_ids(&w, &parent).await;
        assert!(
            fields.iter().all(|f| !f.starts_with("d:")),
            "ids in the signals hash: {fields:?}"
        );
        if ids.iter().filter(|f| f.starts_with("child:")).count() >= 4 {
            let kept: Vec<&String> = fields.iter().filter(|f| f.starts_with("s:child:")).collect();
            assert!(kept.is_empty(), "child words nobody will read are kept: {fields:?}");
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the children never told their parent: {fields:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (code, body) = w
        .post(&format!("/v1/runs/{parent}/signals/done"), json!({"value": 1}))
        .await;
    assert!(code == 200 || code == 202, "{code} {body}");
    let run = w.wait_status(&parent, &["completed", "failed"], LONG).await;
    assert_eq!(run["status"], "completed", "{run}");
    wk.signal("TERM");
    wk.wait_exit(Duration::from_secs(30)).await;
    cleanup(&w.cfg).await;
}

/// Issue 24, hole 7: a parent cancelled after it linked a child but before it created it. The
/// cancel's cascade found no child then; the stalled parent slice created it afterwards, and
/// the child ran its effect for a cancelled parent. The child now learns at its first claim
/// that its parent is gone, and ends cancelled before any call.
#[tokio::test]
async fn a_child_created_after_its_parent_was_cancelled_never_runs() {
    let w = world("kidsorphan").await;
    let mut wk = w.worker(WORKER, "w1", "child.after_link=pause(2500)@1");
    w.wait_registered("family").await;
    let parent = w.start("family", json!({"kids": 1})).await;
    let child = child_of(&parent, 0);
    let deadline = std::time::Instant::now() + LONG;
    while !w.event_types(&parent).await.iter().any(|e| e == "child_started") {
        assert!(
            std::time::Instant::now() < deadline,
            "the parent never linked its child"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        w.store.header(&child).await.unwrap().is_none(),
        "created before the pause ended"
    );
    let (code, body) = w
        .post(&format!("/v1/runs/{parent}/cancel"), json!({"reason": "orphan test"}))
        .await;
    assert_eq!(code, 200, "{body}");
    // The paused slice goes on and creates the child; it must end cancelled, not completed.
    let deadline = std::time::Instant::now() + LONG;
    while w.store.header(&child).await.unwrap().is_none() {
        assert!(
            std::time::Instant::now() < deadline,
            "the stalled parent never created its child"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let c = w
        .wait_status(&child, &["cancelled", "completed", "failed", "blocked"], LONG)
        .await;
    assert_eq!(c["status"], "cancelled", "{c}");
    assert!(
        c["cancel_reason"].as_str().unwrap_or_default().contains("orphan test"),
        "{c}"
    );
    assert_eq!(w.effect_counts().await.get(&format!("gift:{child}")), None);
    wk.signal("TERM");
    wk.wait_exit(Duration::from_secs(30)).await;
    cleanup(&w.cfg).await;
}
