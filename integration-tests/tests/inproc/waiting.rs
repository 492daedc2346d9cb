//! Every waiting cause created for real (issue 29 §2, ARCHITECTURE §16c): a human, a signal, a
//! child, a timer, a flow-control slot, a start rate, a worker, a backlog, a pause, a back-off
//! and a block, each read back from the run (`waiting`), its diagnosis and
//! `GET /v1/runs?waiting_on=`, with the estimate where the engine can make one. Run on
//! whichever backend the tier uses (real Redis and RabbitMQ with `services`).

use serde_json::{json, Value};
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

use savepoint::workflow::{Ctx, Registry, RetryPolicy, StepError, Workflow, WorkflowError};
use savepoint_core::ids::ThreadId;
use savepoint_integration_tests::inproc::InProc;
use savepoint_integration_tests::scenario::World;

const LONG: Duration = Duration::from_secs(60);

/// What each run does, by its input's `mode`.
struct Waits {
    /// Released at the end of the test: the steps that hold a worker slot wait on it.
    release: CancellationToken,
}

impl Workflow for Waits {
    const NAME: &'static str = "waits";
    type Input = Value;
    type Output = Value;
    async fn run(&self, ctx: &Ctx, input: Value) -> Result<Value, WorkflowError> {
        match input["mode"].as_str().unwrap_or("") {
            "human" => ctx.interrupt("approve", json!({"question": "ship?"})).await,
            "signal" => ctx.wait_signal("go").await,
            "parent" => ctx.child::<Waits>("kid", json!({"mode": "signal"})).await,
            "parent_of_bug" => ctx.child::<Waits>("kid", json!({"mode": "panic"})).await,
            "grandparent" => ctx.child::<Waits>("kid", json!({"mode": "parent_of_bug"})).await,
            "sleep" => {
                ctx.sleep("nap", Duration::from_secs(3600)).await?;
                Ok(json!("woke"))
            }
            "retry" => {
                let policy = RetryPolicy {
                    initial: Duration::from_secs(30),
                    max_delay: Duration::from_secs(30),
                    jitter: 0.0,
                    ..RetryPolicy::attempts(3)
                };
                ctx.step("flaky", || async {
                    Err::<Value, _>(StepError::retryable("provider down"))
                })
                .retry(policy)
                .await
            }
            "hold" => {
                let release = self.release.clone();
                ctx.step("hold", move || {
                    let release = release.clone();
                    async move {
                        let _ = tokio::time::timeout(LONG, release.cancelled()).await;
                        Ok(json!("held"))
                    }
                })
                .await
            }
            "panic" => panic!("a bug in the workflow"),
            _ => Ok(json!("done")),
        }
    }
}

/// Starts a run with this body's extra fields (flow, queue).
async fn start(w: &World, input: Value, extra: Value) -> ThreadId {
    let mut body = json!({"workflow": Waits::NAME, "input": input});
    if let (Some(b), Some(x)) = (body.as_object_mut(), extra.as_object()) {
        b.extend(x.clone());
    }
    let (code, reply) = w.post("/v1/runs", body).await;
    assert_eq!(code, 201, "{reply}");
    ThreadId::new(reply["thread_id"].as_str().unwrap().to_owned()).unwrap()
}

/// Waits until the run says it waits on `on`; returns the run.
async fn waiting_on(w: &World, t: &ThreadId, on: &str) -> Value {
    let deadline = Instant::now() + LONG;
    loop {
        let run = w.run(t).await;
        if run["waiting"]["on"] == on {
            eprintln!("waiting on {on} after {:?}", LONG - (deadline - Instant::now()));
            return run;
        }
        assert!(Instant::now() < deadline, "run {t} never waited on {on}: {run}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The run is listed by `GET /v1/runs?waiting_on=on` with the same cause, and its diagnosis
/// carries it too.
async fn listed_and_diagnosed(w: &World, t: &ThreadId, on: &str) -> Value {
    let (code, list) = w.get(&format!("/v1/runs?waiting_on={on}&limit=1000")).await;
    assert_eq!(code, 200, "{list}");
    let row = list["runs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["thread_id"] == t.as_str())
        .unwrap_or_else(|| panic!("{t} is not listed as waiting on {on}: {list}"))
        .clone();
    assert_eq!(row["waiting"]["on"], on, "{row}");
    for r in list["runs"].as_array().unwrap() {
        assert_eq!(r["waiting"]["on"], on, "a run of another cause is listed: {r}");
    }
    let (code, d) = w.get(&format!("/v1/runs/{t}/diagnosis")).await;
    assert_eq!(code, 200, "{d}");
    assert_eq!(d["waiting"]["on"], on, "{d}");
    assert!(
        d["evidence"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e.as_str().unwrap_or("").starts_with(&format!("waiting on {on}: "))),
        "{d}"
    );
    d
}

/// The store clock, as the API shows it on a diagnosis.
async fn now(w: &World, t: &ThreadId) -> u64 {
    w.get(&format!("/v1/runs/{t}/diagnosis")).await.1["now"]
        .as_u64()
        .unwrap()
}

#[tokio::test]
async fn every_waiting_cause_is_named_with_its_numbers_and_listed_by_cause() {
    let w = World::new("waiting", |c| {
        c.worker.concurrency = 4;
        c.worker.prefetch = 4;
    })
    .await;
    let release = CancellationToken::new();
    let mut reg = Registry::new();
    reg.register(Waits {
        release: release.clone(),
    });
    let wk = InProc::start(&w.cfg, reg);
    w.wait_registered(Waits::NAME).await;

    // A human, a signal, a child (which waits for a signal), a timer.
    let human = start(&w, json!({"mode": "human"}), json!({})).await;
    let run = waiting_on(&w, &human, "human").await;
    assert_eq!(run["waiting"]["name"], "approve", "{run}");
    assert!(run["waiting"]["estimate"]["at"].is_null(), "{run}");
    assert!(run["waiting"]["since"].as_u64().is_some(), "{run}");
    listed_and_diagnosed(&w, &human, "human").await;

    let signal = start(&w, json!({"mode": "signal"}), json!({})).await;
    assert_eq!(waiting_on(&w, &signal, "signal").await["waiting"]["name"], "go");
    listed_and_diagnosed(&w, &signal, "signal").await;

    let parent = start(&w, json!({"mode": "parent"}), json!({})).await;
    let run = waiting_on(&w, &parent, "child").await;
    let child = format!("{parent}.c0");
    assert_eq!(run["waiting"]["name"], child.as_str(), "{run}");
    let d = listed_and_diagnosed(&w, &parent, "child").await;
    assert_eq!(d["case"], "waiting_for_child", "{d}");

    let sleeper = start(&w, json!({"mode": "sleep"}), json!({})).await;
    let run = waiting_on(&w, &sleeper, "timer").await;
    let until = run["waiting"]["until"].as_u64().unwrap();
    assert_eq!(run["waiting"]["estimate"]["at"].as_u64(), Some(until), "{run}");
    assert!(until >= now(&w, &sleeper).await + 3_500_000, "{run}");
    assert_eq!(run["waiting"]["name"], "nap", "{run}");
    listed_and_diagnosed(&w, &sleeper, "timer").await;

    // A block: the workflow code panics.
    let bug = start(&w, json!({"mode": "panic"}), json!({})).await;
    let run = waiting_on(&w, &bug, "blocked").await;
    assert_eq!(run["waiting"]["name"], "panic", "{run}");
    listed_and_diagnosed(&w, &bug, "blocked").await;

    // A grandparent whose grandchild is blocked: the doctor follows the chain, and neither
    // waiting run is progressing; what settles the blocked one is offered on each.
    let top = start(&w, json!({"mode": "grandparent"}), json!({})).await;
    let child_of = |run: Value| ThreadId::new(run["waiting"]["name"].as_str().unwrap().to_owned()).unwrap();
    let mid = child_of(waiting_on(&w, &top, "child").await);
    let blocked_kid = child_of(waiting_on(&w, &mid, "child").await);
    waiting_on(&w, &blocked_kid, "blocked").await;
    let (_, kid) = w.get(&format!("/v1/runs/{blocked_kid}/diagnosis")).await;
    for t in [mid, top] {
        let (code, d) = w.get(&format!("/v1/runs/{t}/diagnosis")).await;
        assert_eq!(code, 200, "{d}");
        assert_eq!(
            (&d["case"], &d["progressing"]),
            (&json!("waiting_for_child"), &json!(false)),
            "{d}"
        );
        let summary = d["summary"].as_str().unwrap();
        assert!(
            summary.contains("not progressing") && summary.contains("blocked"),
            "{d}"
        );
        assert_eq!(d["actions"], kid["actions"], "the blocked run's actions: {d}");
        assert!(!kid["actions"].as_array().unwrap().is_empty(), "{kid}");
    }

    // The worker's four slots are taken from here on.
    // A flow-control slot: one slot, held by a run that holds its step.
    let flow = json!({"flow": {"key": "slot", "limit": 1}});
    let holder = start(&w, json!({"mode": "hold"}), flow.clone()).await;
    w.wait_status(&holder, &["running"], LONG).await;
    let in_line = start(&w, json!({"mode": "quick"}), flow).await;
    let run = waiting_on(&w, &in_line, "flow_slot").await;
    let line = &run["waiting"]["line"];
    assert_eq!(
        (line["ahead"].as_u64(), line["holders"].as_u64(), line["limit"].as_u64()),
        (Some(0), Some(1), Some(1)),
        "{run}"
    );
    let d = listed_and_diagnosed(&w, &in_line, "flow_slot").await;
    assert_eq!(d["case"], "in_line", "{d}");

    // A start rate: one start every 20 s; the first took the bucket's only token.
    let rate = json!({"flow": {"key": "rate", "limit": 10, "rate_per_sec": 0.05}});
    let first = start(&w, json!({"mode": "hold"}), rate.clone()).await;
    w.wait_status(&first, &["running"], LONG).await;
    let second = start(&w, json!({"mode": "quick"}), rate).await;
    let run = waiting_on(&w, &second, "rate_limit").await;
    let at = run["waiting"]["estimate"]["at"]
        .as_u64()
        .expect("a rate's next token is known");
    let t0 = now(&w, &second).await;
    assert!(
        at > t0 + 5_000 && at <= t0 + 21_000,
        "the next token in about 20 s: {run}"
    );
    listed_and_diagnosed(&w, &second, "rate_limit").await;

    // A back-off: a failed call waits 30 s before its second attempt, its run still leased.
    let retry = start(&w, json!({"mode": "retry"}), json!({})).await;
    let run = waiting_on(&w, &retry, "backing_off").await;
    assert_eq!(run["status"], "running", "{run}");
    let until = run["waiting"]["until"].as_u64().unwrap();
    assert!(until > now(&w, &retry).await + 20_000, "{run}");
    listed_and_diagnosed(&w, &retry, "backing_off").await;

    // The fourth slot taken: a run now waits in the queue behind the backlog.
    let filler = start(&w, json!({"mode": "hold"}), json!({})).await;
    w.wait_status(&filler, &["running"], LONG).await;
    let queued = start(&w, json!({"mode": "quick"}), json!({})).await;
    let run = waiting_on(&w, &queued, "backlog").await;
    assert_eq!(run["waiting"]["backlog"]["workers"], 1, "{run}");
    assert!(run["waiting"]["backlog"]["depth"].as_u64().is_some(), "{run}");
    listed_and_diagnosed(&w, &queued, "backlog").await;

    // A queue no worker consumes.
    let nowhere = start(&w, json!({"mode": "quick"}), json!({"queue": "nowhere"})).await;
    let run = waiting_on(&w, &nowhere, "worker").await;
    assert!(run["waiting"]["summary"].as_str().unwrap().contains("nowhere"), "{run}");
    listed_and_diagnosed(&w, &nowhere, "worker").await;

    // A pause: a waiting run held by its own pause (it has not stopped it yet).
    let (code, reply) = w
        .post(&format!("/v1/runs/{signal}/pause"), json!({"note": "check first"}))
        .await;
    assert_eq!(code, 200, "{reply}");
    let run = waiting_on(&w, &signal, "paused").await;
    assert!(
        run["waiting"]["summary"].as_str().unwrap().contains("its own pause"),
        "{run}"
    );
    listed_and_diagnosed(&w, &signal, "paused").await;

    // A running run waits on nothing; a bad cause is refused.
    assert!(w.run(&holder).await["waiting"].is_null());
    let (code, reply) = w.get("/v1/runs?waiting_on=lunch").await;
    assert_eq!(code, 400, "{reply}");
    assert!(reply["error"].as_str().unwrap_or("").contains("backing_off"), "{reply}");

    release.cancel();
    let t0 = Instant::now();
    for t in [&holder, &first, &filler, &queued] {
        w.wait_status(t, &["completed"], LONG).await;
    }
    eprintln!("released runs completed in {:?}", t0.elapsed());
    wk.stop().await;
    eprintln!("stopped in {:?}", t0.elapsed());
}
