//! Resuming from a held journal (ARCHITECTURE §7, "Resuming from a held journal"): a worker
//! keeps a run's journal between its slices, and the run's next claim on that worker reads
//! only the entries past it. Run on whichever backend the tier uses (real Redis with
//! `services`).

use serde_json::{json, Value};
use std::time::Duration;

use savepoint::journal::Outcome;
use savepoint::workflow::{Ctx, Registry, Workflow, WorkflowError};
use savepoint_integration_tests::inproc::InProc;
use savepoint_integration_tests::scenario::World;

const LONG: Duration = Duration::from_secs(60);

/// `steps` steps, `s<i>` returning the sum of the ones before it plus `i`; every step a slice
/// of its own (the worker's slice budget is one step), so the run resumes between any two.
struct Sum {
    steps: u32,
}

impl Workflow for Sum {
    const NAME: &'static str = "held_sum";
    type Input = Value;
    type Output = u64;
    async fn run(&self, ctx: &Ctx, _input: Value) -> Result<u64, WorkflowError> {
        let mut sum = 0u64;
        for i in 0..self.steps {
            sum = add_step(ctx, i, sum).await?;
        }
        Ok(sum)
    }
}

/// The step `s<i>`: `before` plus `i`.
async fn add_step(ctx: &Ctx, i: u32, before: u64) -> Result<u64, WorkflowError> {
    ctx.step(&format!("s{i}"), move || async move { Ok(before + u64::from(i)) })
        .await
}

/// A world whose workers yield after every step and keep `cache` journal entries; no sticky
/// queues, so two workers take turns at a run's slices as the task queue hands them out.
async fn world(prefix: &str, cache: usize) -> World {
    World::new(prefix, move |cfg| {
        cfg.worker.slice_max_steps = 1;
        cfg.worker.journal_cache_entries = cache;
        cfg.worker.sticky_ms = 0;
    })
    .await
}

fn registry(steps: u32) -> Registry {
    let mut reg = Registry::new();
    reg.register(Sum { steps });
    reg
}

/// Waits until the run's journal has at least `n` entries.
async fn wait_for_entries(w: &World, t: &savepoint_core::ids::ThreadId, n: u32) {
    let deadline = tokio::time::Instant::now() + LONG;
    loop {
        let h = w.store.header(t).await.expect("read").expect("the run");
        if h.steps >= n {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the run stalled at {} entries",
            h.steps
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[tokio::test]
async fn a_resume_on_the_same_worker_reads_only_what_is_new() {
    // The run's first journal entry is overwritten with bytes that do not decode once the run
    // is a few slices in. A worker that holds the journal never reads that entry again and the
    // run completes; with no journal kept (the same worker, `journal_cache_entries = 0`), the
    // next resume reads the whole journal and blocks the run on the unreadable entry. So the
    // completion shows the resumes read only what was new.
    for (cache, ends) in [(100_000, "completed"), (0, "blocked")] {
        let w = world("held", cache).await;
        let wk = InProc::start(&w.cfg, registry(40));
        w.wait_registered(Sum::NAME).await;
        let t = w.start(Sum::NAME, json!({})).await;
        wait_for_entries(&w, &t, 3).await;
        let run_key = w.store.keys().run(&t).run;
        let _: () = w
            .store
            .query(redis::cmd("HSET").arg(&run_key).arg("j:0").arg(&b"\xc1"[..]))
            .await
            .expect("overwrite the first entry");
        let run = w.wait_status(&t, &["completed", "blocked", "failed"], LONG).await;
        assert_eq!(run["status"], ends, "keeping {cache} entries: {run}");
        if ends == "completed" {
            assert_eq!(run["output"], json!(sum_chain(40)));
        } else {
            let reason = run["blocked_reason"].as_str().unwrap_or_default();
            assert!(reason.contains("entry 0"), "{run}");
        }
        wk.stop().await;
    }
}

/// The output of `Sum { steps: n }`: each step adds its index to the running sum.
fn sum_chain(n: u32) -> u64 {
    (0..u64::from(n)).sum()
}

#[tokio::test]
async fn two_workers_taking_turns_resume_from_what_each_holds() {
    // Two workers share the run's slices: each resume on a worker finds the entries the
    // other wrote since its own last slice, after the ones it holds. The journal ends whole
    // and in order, and the output is what one uninterrupted run computes.
    let w = world("heldtwo", 100_000).await;
    let a = InProc::start(&w.cfg, registry(60));
    let b = InProc::start(&w.cfg, registry(60));
    w.wait_registered(Sum::NAME).await;
    let runs: Vec<_> = futures::future::join_all((0..4).map(|_| w.start(Sum::NAME, json!({})))).await;
    for t in &runs {
        let run = w.wait_status(t, &["completed", "blocked", "failed"], LONG).await;
        assert_eq!(run["status"], "completed", "{run}");
        assert_eq!(run["output"], json!(sum_chain(60)));
        let (_, entries) = w.store.get(t).await.expect("read").expect("the run");
        let mut sum = 0u64;
        for (i, e) in entries.iter().enumerate() {
            assert_eq!(e.name, format!("s{i}"));
            sum += i as u64;
            assert!(
                matches!(&e.outcome, Outcome::Ok(v) if *v == json!(sum)),
                "entry {i}: {e:?}"
            );
        }
        assert_eq!(entries.len(), 60);
    }
    a.stop().await;
    b.stop().await;
}

/// Steps, each followed by a short durable sleep and, every third, a wait for a signal; counts
/// how often its body starts from the top (a replay) in `starts`.
struct Suspending {
    steps: u32,
    starts: std::sync::Arc<std::sync::atomic::AtomicU32>,
}

impl Workflow for Suspending {
    const NAME: &'static str = "held_suspending";
    type Input = Value;
    type Output = u64;
    async fn run(&self, ctx: &Ctx, _input: Value) -> Result<u64, WorkflowError> {
        self.starts.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let mut sum = 0u64;
        for i in 0..self.steps {
            sum = add_step(ctx, i, sum).await?;
            ctx.sleep(&format!("z{i}"), Duration::from_millis(1)).await?;
            if i % 3 == 2 {
                let n: u64 = ctx.wait_signal(format!("go{i}").as_str()).await?;
                sum += n;
            }
        }
        Ok(sum)
    }
}

/// Answers each signal wait of a 12-step `Suspending` run as it comes, then checks that the
/// run completed with what it computes.
async fn answer_and_complete(w: &World, t: &savepoint_core::ids::ThreadId) {
    for i in (2..12).step_by(3) {
        let run = w
            .wait_status(t, &["waiting", "completed", "blocked", "failed"], LONG)
            .await;
        assert_eq!(run["status"], "waiting", "{run}");
        let (code, body) = w
            .post(&format!("/v1/runs/{t}/signals/go{i}"), json!({"value": 1000}))
            .await;
        assert_eq!(code / 100, 2, "{body}");
    }
    let run = w.wait_status(t, &["completed", "blocked", "failed"], LONG).await;
    assert_eq!(run["status"], "completed", "{run}");
    assert_eq!(run["output"], json!(sum_chain(12) + 4 * 1000));
}

#[tokio::test]
async fn a_parked_body_goes_on_without_replaying() {
    // One worker, a slice per step, a durable sleep after every step and a signal wait after
    // every third: every suspension parks the body, and every next slice goes on from it, so
    // the body starts once. With parking off (the same worker, `parked_bodies = 0`), every
    // slice replays from the top. The output and the journal are the same either way.
    for park in [true, false] {
        let w = World::new("parked", move |cfg| {
            cfg.worker.slice_max_steps = 1;
            cfg.worker.parked_bodies = if park { 10_000 } else { 0 };
        })
        .await;
        let starts = std::sync::Arc::new(std::sync::atomic::AtomicU32::new(0));
        let mut reg = Registry::new();
        reg.register(Suspending {
            steps: 12,
            starts: starts.clone(),
        });
        let wk = InProc::start(&w.cfg, reg);
        w.wait_registered(Suspending::NAME).await;
        let t = w.start(Suspending::NAME, json!({})).await;
        answer_and_complete(&w, &t).await;
        let (_, entries) = w.store.get(&t).await.expect("read").expect("the run");
        // 12 steps, 12 sleeps, 4 signals.
        assert_eq!(entries.len(), 28, "{entries:?}");
        let starts = starts.load(std::sync::atomic::Ordering::SeqCst);
        if park {
            assert_eq!(starts, 1, "the body replayed {} times", starts - 1);
        } else {
            assert!(starts >= 28, "every slice replays: {starts} starts");
        }
        wk.stop().await;
    }
}

/// `steps` steps, each a slice of its own (the worker yields after every step); counts how
/// often its body starts from the top in `starts` and how often a step's function runs in
/// `calls`.
struct Counted {
    steps: u32,
    starts: std::sync::Arc<std::sync::atomic::AtomicU32>,
    calls: std::sync::Arc<std::sync::atomic::AtomicU32>,
}

impl Workflow for Counted {
    const NAME: &'static str = "held_counted";
    type Input = Value;
    type Output = u64;
    async fn run(&self, ctx: &Ctx, _input: Value) -> Result<u64, WorkflowError> {
        use std::sync::atomic::Ordering::SeqCst;
        self.starts.fetch_add(1, SeqCst);
        let mut sum = 0u64;
        for i in 0..self.steps {
            let calls = self.calls.clone();
            sum = ctx
                .step(&format!("s{i}"), move || {
                    calls.fetch_add(1, SeqCst);
                    async move { Ok(sum + u64::from(i)) }
                })
                .await?;
        }
        Ok(sum)
    }
}

type Counter = std::sync::Arc<std::sync::atomic::AtomicU32>;

fn counted(steps: u32) -> (Registry, Counter, Counter) {
    let (starts, calls) = (Counter::default(), Counter::default());
    let mut reg = Registry::new();
    reg.register(Counted {
        steps,
        starts: starts.clone(),
        calls: calls.clone(),
    });
    (reg, starts, calls)
}

/// A world whose workers yield after every step, with sticky queues of `sticky_ms` (0: none).
async fn sticky_world(prefix: &str, sticky_ms: u32) -> World {
    World::new(prefix, move |cfg| {
        cfg.worker.slice_max_steps = 1;
        cfg.worker.sticky_ms = sticky_ms;
    })
    .await
}

/// Tasks sent to a sticky queue so far, in this process (every test of it counts here).
fn sticky_sent() -> u64 {
    let m = &savepoint_core::metrics::metrics().sticky;
    let labels = vec![("reason", "continue".to_owned())];
    m.get_or_create(&labels).get()
}

#[tokio::test]
async fn a_yielded_run_comes_back_to_the_worker_that_holds_its_body() {
    // Two workers, a run that yields after every step. On RabbitMQ each continuation goes to
    // the sticky queue of the worker that parked the body, so that worker takes every slice
    // and the body starts once; without sticky queues (`sticky_ms = 0`) the task queue hands
    // the continuations to either worker and the body replays wherever it lands without its
    // body. (The embedded queue keeps sticky queues as RabbitMQ does.)
    use std::sync::atomic::Ordering::SeqCst;
    let sticky_queues = true;
    for sticky_ms in [2_000, 0] {
        let w = sticky_world("sticky", sticky_ms).await;
        let (reg_a, starts_a, calls_a) = counted(30);
        let (reg_b, starts_b, calls_b) = counted(30);
        let a = InProc::start(&w.cfg, reg_a);
        let b = InProc::start(&w.cfg, reg_b);
        w.wait_registered(Counted::NAME).await;
        tokio::time::sleep(Duration::from_millis(300)).await; // both consuming
        let sent = sticky_sent();
        let t = w.start(Counted::NAME, json!({})).await;
        let run = w.wait_status(&t, &["completed", "blocked", "failed"], LONG).await;
        assert_eq!(run["status"], "completed", "{run}");
        assert_eq!(run["output"], json!(sum_chain(30)));
        let (_, entries) = w.store.get(&t).await.expect("read").expect("the run");
        assert_eq!(entries.len(), 30);
        assert_eq!(calls_a.load(SeqCst) + calls_b.load(SeqCst), 30, "a step ran twice");
        let starts = starts_a.load(SeqCst) + starts_b.load(SeqCst);
        if sticky_queues && sticky_ms > 0 {
            assert_eq!(starts, 1, "the body replayed {} times", starts - 1);
            assert!(sticky_sent() >= sent + 29, "29 continuations, sticky");
        } else if sticky_queues {
            assert!(starts > 1, "two workers sharing the task queue: the body never moved");
        }
        a.stop().await;
        b.stop().await;
    }
}

/// Worker A, one slice at a time (so the slice that publishes holds the only permit and A never
/// claims its own continuation), takes a 5-step run, commits its first step, sends the
/// continuation to its sticky queue and dies (as `kill -9`) right after the broker confirmed
/// it. Returns the run, A, and A's step calls.
async fn a_dies_after_its_sticky_continuation(w: &World) -> (savepoint_core::ids::ThreadId, InProc, Counter) {
    let (reg_a, _, calls_a) = counted(5);
    let mut cfg_a = w.cfg.clone();
    cfg_a.worker.concurrency = 1;
    let a = InProc::with_failpoints(&cfg_a, reg_a, "publish.after=abort@1");
    w.wait_registered(Counted::NAME).await;
    let t = w.start(Counted::NAME, json!({})).await;
    a.crashed().await;
    (t, a, calls_a)
}

/// Starts worker B and waits for the run to complete with what it computes, within 30 s of
/// `since`; returns B and its step calls.
async fn b_completes(w: &World, t: &savepoint_core::ids::ThreadId, since: std::time::Instant) -> (InProc, Counter) {
    let (reg_b, _, calls_b) = counted(5);
    let b = InProc::start(&w.cfg, reg_b);
    let run = w.wait_status(t, &["completed", "blocked", "failed"], LONG).await;
    assert_eq!(run["status"], "completed", "{run}");
    assert_eq!(run["output"], json!(sum_chain(5)));
    assert!(
        since.elapsed() < Duration::from_secs(30),
        "the run waited {:?}: its task stayed behind",
        since.elapsed()
    );
    (b, calls_b)
}

#[tokio::test]
async fn a_task_left_in_a_dead_workers_sticky_queue_goes_on_to_the_task_queue() {
    // Worker A takes the run, commits its first step and yields: the continuation goes to A's
    // sticky queue, and A dies (as `kill -9`) right after the broker confirmed it (A runs one
    // slice at a time, so the slice that published holds the only permit and A never claims
    // the continuation). The sticky queue goes with A's connection, and the task with it; the
    // task did not mark the run queued, so the scanner rings the run within its near net
    // (2 s here), the ring to A's queue is unroutable and goes to the task queue, and worker
    // B, started after A died, completes the run: every step once.
    use std::sync::atomic::Ordering::SeqCst;
    let w = sticky_world("stickydead", 1_000).await;
    let sent = sticky_sent();
    let (t, a, calls_a) = a_dies_after_its_sticky_continuation(&w).await;
    assert!(sticky_sent() > sent, "A's continuation went to its sticky queue");
    let (b, calls_b) = b_completes(&w, &t, std::time::Instant::now()).await;
    assert_eq!(calls_a.load(SeqCst), 1, "A ran the first step");
    assert_eq!(calls_b.load(SeqCst), 4, "B ran the other four, once each");
    a.kill().await;
    b.stop().await;
}

#[tokio::test]
async fn a_woken_run_comes_back_to_the_worker_that_holds_its_body() {
    // Two workers, a run that sleeps 1 ms after every step and waits for a signal after every
    // third: its wake-ups are published by the scheduler (the scanner after a sleep, the API
    // with a signal), not by a worker. They go to the sticky queue of the worker that
    // suspended the run keeping its body (the run hash names it), so the body starts once;
    // without sticky queues they go to the task queue and the run moves between the workers.
    let sticky_queues = true;
    for sticky_ms in [2_000, 0] {
        let w = sticky_world("stickywake", sticky_ms).await;
        let starts = std::sync::Arc::new(std::sync::atomic::AtomicU32::new(0));
        let reg = || {
            let mut reg = Registry::new();
            reg.register(Suspending {
                steps: 12,
                starts: starts.clone(),
            });
            reg
        };
        let a = InProc::start(&w.cfg, reg());
        let b = InProc::start(&w.cfg, reg());
        w.wait_registered(Suspending::NAME).await;
        tokio::time::sleep(Duration::from_millis(300)).await; // both consuming
        let t = w.start(Suspending::NAME, json!({})).await;
        answer_and_complete(&w, &t).await;
        let (_, entries) = w.store.get(&t).await.expect("read").expect("the run");
        assert_eq!(entries.len(), 28, "{entries:?}");
        let starts = starts.load(std::sync::atomic::Ordering::SeqCst);
        if sticky_queues && sticky_ms > 0 {
            assert_eq!(starts, 1, "the body replayed {} times", starts - 1);
        } else if sticky_queues {
            assert!(starts > 1, "two workers sharing the task queue: the body never moved");
        }
        a.stop().await;
        b.stop().await;
    }
}

#[cfg(feature = "services")]
#[tokio::test]
async fn a_task_lost_with_a_sticky_queue_is_rung_again_soon_on_rabbitmq() {
    // As a RabbitMQ node that held a sticky queue going down: worker A's continuation was
    // confirmed into A's sticky queue, A died, and the queue is deleted with the task in it
    // (its TTL is a minute here, so the TTL does not save it). A task in a sticky queue does
    // not mark the run queued, so the run's net is the near one (`redeliver`, 2 s here): the
    // scanner rings it, the ring to A's queue is unroutable and falls back to the task queue,
    // and worker B completes the run in seconds, not after the queued-redeliver delay.
    use std::sync::atomic::Ordering::SeqCst;
    let w = sticky_world("stickylost", 60_000).await;
    let (t, a, calls_a) = a_dies_after_its_sticky_continuation(&w).await;
    let prefix = format!("{}.s.", w.cfg.namespace);
    let listed = std::process::Command::new("rabbitmqctl")
        .args(["-q", "list_queues", "name", "messages", "--no-table-headers"])
        .output()
        .expect("rabbitmqctl");
    let listed = String::from_utf8_lossy(&listed.stdout).into_owned();
    // (name, messages ready or unacknowledged)
    let sticky: Vec<(&str, &str)> = listed
        .lines()
        .filter_map(|l| l.split_once(char::is_whitespace))
        .filter(|(q, _)| q.starts_with(&prefix))
        .collect();
    assert_eq!(sticky.len(), 1, "A's sticky queue: {listed}");
    assert_eq!(sticky[0].1.trim(), "1", "the continuation is in it: {listed}");
    let deleted = std::process::Command::new("rabbitmqctl")
        .args(["-q", "delete_queue", sticky[0].0])
        .output()
        .expect("rabbitmqctl");
    assert!(deleted.status.success(), "{deleted:?}");
    let (b, calls_b) = b_completes(&w, &t, std::time::Instant::now()).await;
    assert_eq!(calls_a.load(SeqCst) + calls_b.load(SeqCst), 5, "each step once");
    a.kill().await;
    b.stop().await;
}

#[tokio::test]
async fn a_worker_whose_own_runs_keep_yielding_still_takes_new_runs() {
    // One worker, three slots, twelve long runs that yield after every step: on RabbitMQ every
    // continuation goes to the worker's own sticky queue, which therefore always has a task
    // ready. A new one-step run's task comes through the task queue to the same worker. It
    // must start within a slice or two, not after the long runs end: the worker takes its
    // consumers in turn, and a sticky task it held past the queue's TTL goes on to the task
    // queue. (Before the turns, the sticky consumer was asked first on every free slot, and
    // the new run waited for all twelve long runs, 24,000 slices.) The bound below is the
    // liveness promise, generous for a loaded machine: a slot frees every few milliseconds.
    use std::sync::atomic::Ordering::SeqCst;
    const LONG_RUNS: usize = 12;
    const BOUND: Duration = Duration::from_secs(10);
    let w = World::new("stickybusy", |cfg| {
        cfg.worker.slice_max_steps = 1;
        cfg.worker.sticky_ms = 2_000;
        cfg.worker.concurrency = 3;
    })
    .await;
    let (mut reg, _, calls) = counted(2_000);
    reg.register(Sum { steps: 1 });
    let wk = InProc::start(&w.cfg, reg);
    w.wait_registered(Counted::NAME).await;
    let mut long = Vec::new();
    for _ in 0..LONG_RUNS {
        long.push(w.start(Counted::NAME, json!({})).await);
    }
    // The long runs are going round the worker's sticky queue.
    let busy = tokio::time::Instant::now() + LONG;
    while calls.load(SeqCst) < 200 {
        assert!(tokio::time::Instant::now() < busy, "the long runs did not start");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let since = std::time::Instant::now();
    let short = w.start(Sum::NAME, json!({})).await;
    let run = w.wait_status(&short, &["completed", "blocked", "failed"], LONG).await;
    let waited = since.elapsed();
    assert_eq!(run["status"], "completed", "{run}");
    let done_long = calls.load(SeqCst);
    assert!(
        waited < BOUND,
        "a new run waited {waited:?} behind a worker's own yielding runs ({done_long} of their steps ran meanwhile)"
    );
    assert!(
        done_long < (LONG_RUNS as u32) * 2_000,
        "the long runs had ended before the new one completed: nothing was measured"
    );
    for t in &long {
        let (status, body) = w.post(&format!("/v1/runs/{t}/cancel"), json!({})).await;
        assert!(status < 300, "cancel {t}: {status} {body}");
    }
    for t in &long {
        let run = w.wait_status(t, &["cancelled", "completed"], LONG).await;
        assert_ne!(run["status"], "failed", "{run}");
    }
    wk.stop().await;
}

/// The hand-back on RabbitMQ, so these run with the `services` feature (the embedded queue
/// pushes deliveries a worker cannot start as RabbitMQ does; the simulator's busy-worker
/// phase, invariant 18, checks the hand-back there).
#[cfg(feature = "services")]
mod hand_back {
    use super::*;

    /// One step that waits for the gate to open (at most a minute).
    struct Gated {
        open: std::sync::Arc<std::sync::atomic::AtomicBool>,
    }

    impl Workflow for Gated {
        const NAME: &'static str = "held_gated";
        type Input = Value;
        type Output = u32;
        async fn run(&self, ctx: &Ctx, _input: Value) -> Result<u32, WorkflowError> {
            let open = std::sync::Arc::clone(&self.open);
            ctx.step("wait", move || {
                let open = std::sync::Arc::clone(&open);
                async move {
                    let end = tokio::time::Instant::now() + LONG;
                    while !open.load(std::sync::atomic::Ordering::SeqCst) && tokio::time::Instant::now() < end {
                        tokio::time::sleep(Duration::from_millis(20)).await;
                    }
                    Ok(1u32)
                }
            })
            .await
        }
    }

    /// Tasks handed back by a worker whose slots were all busy, in this process.
    fn handed_back() -> u64 {
        let labels = vec![("reason", "hand_back".to_owned())];
        savepoint_core::metrics::metrics()
            .published
            .get_or_create(&labels)
            .get()
    }

    /// A worker A with one slot, busy with a [`Gated`] run whose step ends when `open` is set,
    /// and `short` new one-step runs started after it (the broker pushes their tasks to A, its only
    /// consumer, though A has no slot for them).
    struct FullWorker {
        w: World,
        open: std::sync::Arc<std::sync::atomic::AtomicBool>,
        a: InProc,
        gated: savepoint_core::ids::ThreadId,
        short: Vec<savepoint_core::ids::ThreadId>,
    }

    impl FullWorker {
        async fn new(prefix: &str, short: usize) -> Self {
            // (A lease long enough that A keeps the gated run while rabbitmqctl's VM takes the
            // machine's cores for a second.)
            let w = World::new(prefix, |cfg| {
                cfg.worker.sticky_ms = 0;
                cfg.lease_ms = cfg.lease_ms.max(5_000);
            })
            .await;
            let open = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
            let mut cfg_a = w.cfg.clone();
            cfg_a.worker.concurrency = 1;
            let a = InProc::start(&cfg_a, gated_registry(&open));
            w.wait_registered(Gated::NAME).await;
            let gated = w.start(Gated::NAME, json!({})).await;
            w.wait_status(&gated, &["running"], LONG).await;
            let mut runs = Vec::new();
            for _ in 0..short {
                runs.push(w.start(Sum::NAME, json!({})).await);
            }
            tokio::time::sleep(Duration::from_millis(300)).await;
            Self {
                w,
                open,
                a,
                gated,
                short: runs,
            }
        }

        /// A worker with room (the default concurrency).
        fn another(&self) -> InProc {
            InProc::start(&self.w.cfg, gated_registry(&self.open))
        }

        /// Every short run completes while A's step is still under way; then it ends.
        async fn short_runs_complete_first(self, b: InProc) {
            use std::sync::atomic::Ordering::SeqCst;
            for t in &self.short {
                let run = self
                    .w
                    .wait_status(t, &["completed", "blocked", "failed"], Duration::from_secs(20))
                    .await;
                assert_eq!(run["status"], "completed", "{run}");
            }
            let (_, g) = self.w.get(&format!("/v1/runs/{}", self.gated)).await;
            assert_eq!(
                g["status"], "running",
                "A's step ended first: nothing was measured: {g}"
            );
            self.open.store(true, SeqCst);
            self.w.wait_status(&self.gated, &["completed"], LONG).await;
            self.a.stop().await;
            b.stop().await;
        }
    }

    fn gated_registry(open: &std::sync::Arc<std::sync::atomic::AtomicBool>) -> Registry {
        let mut reg = registry(1);
        reg.register(Gated {
            open: std::sync::Arc::clone(open),
        });
        reg
    }

    #[tokio::test]
    async fn a_task_a_full_worker_holds_goes_to_a_worker_with_room_on_rabbitmq() {
        // Worker A has one slot, busy with a step that does not end until the test says so. A new
        // run's task reaches A (the broker pushes up to the prefetch whatever the slots), then
        // worker B starts with room. Before the hand-back, the task waited in A until A's step
        // ended, however long (the broker never moves an unsettled delivery to another
        // consumer); now A gives it back once its slots have been busy a second, and B runs it
        // while A's step is still under way.
        let before = handed_back();
        let full = FullWorker::new("handback", 1).await;
        let b = full.another();
        full.short_runs_complete_first(b).await;
        assert!(
            handed_back() > before,
            "the new run was not handed back by the full worker"
        );
    }

    /// A RabbitMQ policy, cleared when dropped (a failing test leaves none behind).
    struct Policy(String);

    impl Drop for Policy {
        fn drop(&mut self) {
            let _ = std::process::Command::new("rabbitmqctl")
                .args(["-q", "clear_policy", &self.0])
                .output();
        }
    }

    fn rabbitmqctl(args: &[&str]) {
        let out = std::process::Command::new("rabbitmqctl")
            .args(args)
            .output()
            .expect("rabbitmqctl");
        assert!(out.status.success(), "rabbitmqctl {args:?}: {out:?}");
    }

    #[tokio::test]
    async fn a_task_the_broker_refuses_to_take_back_is_requeued_not_stranded_on_rabbitmq() {
        // As above, but the broker refuses the hand-back's publishes (a length limit on the task
        // queue, as a full or unreachable queue would): the tasks must not stay unsettled on the
        // full worker's channel, which goes on consuming and would never give them up (the
        // reviewer's finding: 28 runs pending for minutes beside an idle worker). They are
        // requeued, and the worker with room runs them while the full one's step is under way.
        const SHORT: usize = 4;
        let full = FullWorker::new("handbackfull", SHORT).await;
        let w = &full.w;
        let queue = format!("{}.q.{}", w.cfg.namespace, w.cfg.queue);
        let policy = format!("{}-full", w.cfg.namespace);
        rabbitmqctl(&[
            "-q",
            "set_policy",
            "--apply-to",
            "queues",
            "--priority",
            "99",
            &policy,
            &format!("^{}$", queue.replace('.', "\\.")),
            r#"{"max-length":0,"overflow":"reject-publish"}"#,
        ]);
        let policy = Policy(policy);
        let requeued = || {
            let labels = vec![("how", "requeued".to_owned())];
            savepoint_core::metrics::metrics()
                .handed_back
                .get_or_create(&labels)
                .get()
        };
        let before = requeued();
        // A worker with room as A reads the fleet (a registration that consumes nothing, so the
        // queue keeps what A gives back): A hands back; the broker takes the first task and,
        // the queue now over its limit, refuses the rest.
        let roomy = json!({"workflows": [{"name": Sum::NAME, "version": 1, "min_version": 1}],
            "queue": w.cfg.queue, "ttl_ms": 60_000, "concurrency": 8, "in_flight": 0,
            "capabilities": ["pause"]});
        w.store
            .register_raw("roomy", &roomy.to_string(), Duration::from_secs(60))
            .await
            .unwrap();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        while requeued() < before + SHORT as u64 - 1 {
            assert!(
                tokio::time::Instant::now() < deadline,
                "A did not try to hand its tasks back ({} requeued)",
                requeued() - before
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        drop(policy);
        w.store.deregister_worker("roomy").await.unwrap();
        let b = full.another();
        full.short_runs_complete_first(b).await;
    }
}
