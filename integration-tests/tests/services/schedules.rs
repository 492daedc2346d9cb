//! Schedules (issue 10) against real RabbitMQ and Redis: two scheduler replicas fire an
//! every-second schedule for ten seconds while one is SIGKILLed at its own failpoint — each
//! firing time gets exactly one run; overlap policies; catch-up after downtime; pause,
//! resume, trigger and the API's refusals.

use serde_json::{json, Value};
use std::collections::BTreeSet;
use std::time::Duration;

use chrono::NaiveDateTime;
use savepoint::workflow::{Ctx, Registry, Workflow, WorkflowError};
use savepoint_core::ids::ThreadId;
use savepoint_integration_tests::inproc::InProc;
use savepoint_integration_tests::procs::{killed_by_signal, Proc};
use savepoint_integration_tests::scenario::World;
use savepoint_integration_tests::{cleanup, wait_until};
use savepoint_runtime::security::{PayloadCodec, Redacted};
use savepoint_store::ScriptStore;

const WORKER: &str = env!("CARGO_BIN_EXE_it-worker");
const SCHEDULER: &str = env!("CARGO_BIN_EXE_it-scheduler");
const LONG: Duration = Duration::from_secs(30);

/// The firing time (ms) a schedule run's thread id names (`<id>-20261202T093000Z`).
fn firing_of(id: &str, thread: &str) -> Option<u64> {
    let stamp = thread.strip_prefix(id)?.strip_prefix('-')?;
    let t = NaiveDateTime::parse_from_str(stamp, "%Y%m%dT%H%M%SZ").ok()?;
    Some(t.and_utc().timestamp_millis() as u64)
}

async fn runs_of(http: &reqwest::Client, base: &str, id: &str) -> Vec<(u64, Value)> {
    let list: Value = http
        .get(format!("{base}/v1/runs?limit=1000"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let mut out: Vec<(u64, Value)> = list["runs"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|r| Some((firing_of(id, r["thread_id"].as_str()?)?, r.clone())))
        .collect();
    out.sort_by_key(|r| r.0);
    out
}

async fn spawn_replica(w: &World, name: &str, failpoints: &str) -> (Proc, String) {
    let mut cfg = w.cfg.clone();
    cfg.failpoints = failpoints.to_owned();
    spawn_with(w, name, &cfg).await
}

/// A scheduler process on `cfg`, once it is ready.
async fn spawn_with(w: &World, name: &str, cfg: &savepoint_runtime::config::Config) -> (Proc, String) {
    w.scheduler_proc(SCHEDULER, name, cfg).await
}

/// Two replicas (processes), one SIGKILLed by `schedule.before_create=kill@3` — after it
/// moved the schedule on with the firing's run recorded as pending, before it created the
/// run (the survivor's next pass creates it). Every second for about ten seconds: each firing
/// time from the first to the last has exactly one run, every run completes, and the
/// schedule counted each once.
#[tokio::test]
async fn two_replicas_one_sigkilled_fire_each_second_exactly_once() {
    let w = World::new("screp", |_| {}).await;
    // Only the two replicas below fire: the test's own scheduler stops.
    w.sched.shutdown_token().cancel();
    let mut wk = w.worker(WORKER, "w1", "");
    w.wait_registered("chain").await;
    // B stalls 300 ms before each advance, so A is first to each firing and reaches its
    // failpoint every time.
    let (mut victim, _) = spawn_replica(&w, "replica-a", "schedule.before_create=kill@3").await;
    let (mut survivor, base) = spawn_replica(&w, "replica-b", "schedule.before_advance=pause(300)").await;
    let r = w
        .http
        .post(format!("{base}/v1/schedules"))
        .json(
            &json!({"id": "tick", "workflow": "chain", "input": {"steps": 1}, "every_secs": 1, "overlap": "allow_all"}),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 201, "{:?}", r.text().await);
    let status = victim.wait_exit(LONG).await;
    assert!(
        killed_by_signal(&status),
        "replica A should have been killed at its failpoint: {status:?}"
    );
    tokio::time::sleep(Duration::from_secs(7)).await;
    let paused: Value = w
        .http
        .post(format!("{base}/v1/schedules/tick/pause"))
        .json(&json!({"note": "test over"}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(paused["state"], "paused", "{paused}");
    assert_eq!(paused["note"], "test over", "{paused}");
    let runs = wait_until(LONG, "every run of the schedule completes", || {
        let (http, base) = (w.http.clone(), base.clone());
        async move {
            let runs = runs_of(&http, &base, "tick").await;
            runs.iter().all(|(_, r)| r["status"] == "completed").then_some(runs)
        }
    })
    .await;
    let times: Vec<u64> = runs.iter().map(|r| r.0).collect();
    assert!(times.len() >= 9, "about ten firings: {times:?}");
    let distinct: BTreeSet<u64> = times.iter().copied().collect();
    assert_eq!(distinct.len(), times.len(), "one run per firing time: {times:?}");
    for pair in times.windows(2) {
        assert_eq!(pair[1] - pair[0], 1000, "no firing missed: {times:?}");
    }
    // A replica may still be between the last firing's run and its advance.
    let last = *times.last().unwrap();
    let s: Value = wait_until(LONG, "the last firing is accounted", || {
        let (http, base) = (w.http.clone(), base.clone());
        async move {
            let s: Value = http
                .get(format!("{base}/v1/schedules/tick"))
                .send()
                .await
                .ok()?
                .json()
                .await
                .ok()?;
            (s["last_at"] == last).then_some(s)
        }
    })
    .await;
    assert_eq!(s["fired"], times.len() as u64, "each firing counted once: {s}");
    assert_eq!(s["skipped"], 0, "{s}");
    survivor.signal("TERM");
    survivor.wait_exit(LONG).await;
    wk.signal("TERM");
    wk.wait_exit(LONG).await;
    cleanup(&w.cfg).await;
}

/// Its step takes 2.5 s: firings every second overlap it.
struct Slow;

impl Workflow for Slow {
    const NAME: &'static str = "slow";
    type Input = Value;
    type Output = Value;
    async fn run(&self, ctx: &Ctx, _input: Value) -> Result<Value, WorkflowError> {
        ctx.step("work", || async {
            tokio::time::sleep(Duration::from_millis(2500)).await;
            Ok(json!("done"))
        })
        .await
    }
}

/// Runs of schedule `id` with their status, created and finished times.
async fn spans(w: &World, id: &str) -> Vec<(u64, Value)> {
    runs_of(&w.http, &w.sched.base_url, id).await
}

#[tokio::test]
async fn overlap_policies_skip_buffer_and_cancel() {
    let w = World::new("scover", |_| {}).await;
    let mut reg = Registry::new();
    reg.register(Slow);
    let wk = InProc::start(&w.cfg, reg);
    w.wait_registered("slow").await;
    for (id, overlap) in [("skip", "skip"), ("buf", "buffer_one"), ("cancel", "cancel_previous")] {
        let (code, body) = w
            .post(
                "/v1/schedules",
                json!({"id": id, "workflow": "slow", "every_secs": 1, "overlap": overlap}),
            )
            .await;
        assert_eq!(code, 201, "{body}");
    }
    tokio::time::sleep(Duration::from_millis(6500)).await;
    for id in ["skip", "buf", "cancel"] {
        let (code, _) = w.post(&format!("/v1/schedules/{id}/pause"), json!({})).await;
        assert_eq!(code, 200);
    }
    let settled = |id: &'static str| {
        let w = &w;
        async move {
            wait_until(LONG, "the schedule's runs end", || async move {
                let runs = spans(w, id).await;
                let (_, s) = w.get(&format!("/v1/schedules/{id}")).await;
                (s["buffered_at"].is_null()
                    && runs
                        .iter()
                        .all(|(_, r)| ["completed", "cancelled"].contains(&r["status"].as_str().unwrap_or(""))))
                .then_some((runs, s))
            })
            .await
        }
    };
    // skip: never two at once; the firings in between were skipped.
    let (runs, s) = settled("skip").await;
    assert!((2..=3).contains(&runs.len()), "{runs:?}");
    for pair in runs.windows(2) {
        let (a, b) = (&pair[0].1, &pair[1].1);
        assert!(
            b["created_at"].as_u64() >= a["finished_at"].as_u64(),
            "overlapped: {a} {b}"
        );
    }
    assert!(s["skipped"].as_u64().unwrap() >= 3, "{s}");
    // buffer_one: one firing held and started when the previous run ended.
    let (runs, s) = settled("buf").await;
    assert!(runs.len() >= 2, "{runs:?}");
    for pair in runs.windows(2) {
        let (a, b) = (&pair[0].1, &pair[1].1);
        assert!(
            b["created_at"].as_u64() >= a["finished_at"].as_u64(),
            "overlapped: {a} {b}"
        );
    }
    assert!(s["skipped"].as_u64().unwrap() >= 1, "{s}");
    assert_eq!(s["fired"].as_u64(), Some(runs.len() as u64), "{s}");
    // cancel_previous: each firing cancels the run before it; the last one completes.
    let (runs, _) = settled("cancel").await;
    assert!(runs.len() >= 5, "{runs:?}");
    let (last, before) = runs.split_last().unwrap();
    assert_eq!(last.1["status"], "completed", "{runs:?}");
    assert!(before.iter().all(|(_, r)| r["status"] == "cancelled"), "{runs:?}");
    wk.stop().await;
    cleanup(&w.cfg).await;
}

/// A schedule whose schedulers were down for 100 s (its next firing moved into the past in
/// Redis): `latest` starts one run for the missed firings, `all` the latest `catchup_limit`;
/// a firing within the window runs as itself.
#[tokio::test]
async fn catch_up_after_downtime_fires_once_or_each_missed_time_up_to_the_limit() {
    let w = World::new("sccatch", |_| {}).await;
    let mut wk = w.worker(WORKER, "w1", "");
    w.wait_registered("chain").await;
    // The firings are on a 10 s grid and a firing is missed once it is 5 s old. A firing
    // that turned 5 s old between `now` and the loop's pass would be missed for the loop
    // and not for this test's count, so start just after such a turn: the next one is 9 s
    // away.
    let w = &w;
    let now = wait_until(LONG, "a firing just turned 5 s old", || async move {
        let t = w.store.server_time().await.ok()?;
        (5_200..6_000).contains(&(t % 10_000)).then_some(t)
    })
    .await;
    // Both paused first, so the loop does not fire them before their next time is moved.
    for (id, catchup) in [("late1", "latest"), ("lateall", "all")] {
        let body = json!({"id": id, "workflow": "chain", "input": {"steps": 1}, "every_secs": 10,
            "catchup": catchup, "catchup_limit": 3, "catchup_window_secs": 5, "overlap": "allow_all"});
        assert_eq!(w.post("/v1/schedules", body).await.0, 201);
        assert_eq!(w.post(&format!("/v1/schedules/{id}/pause"), json!({})).await.0, 200);
    }
    let past = (now / 10_000 - 10) * 10_000; // ten firings ago
    for id in ["late1", "lateall"] {
        let key = w.store.keys().schedule(id);
        let _: () = w
            .store
            .query(redis::cmd("HDEL").arg(&key).arg("paused").arg("note"))
            .await
            .unwrap();
        let _: () = w
            .store
            .query(redis::cmd("HSET").arg(&key).arg("next").arg(past))
            .await
            .unwrap();
        let _: () = w
            .store
            .query(redis::cmd("ZADD").arg(w.store.keys().schedule_next()).arg(past).arg(id))
            .await
            .unwrap();
    }
    for (id, want) in [("late1", 1u64), ("lateall", 3)] {
        // Moved on, and the runs its move decided created (a pass moves the schedule first,
        // recording them as pending, then creates them).
        let s = wait_until(LONG, "the schedule caught up", || async move {
            let (_, s) = w.get(&format!("/v1/schedules/{id}")).await;
            let created = w.store.schedule_get(id).await.ok()??.pending.is_empty();
            (s["next_at"].as_u64() > Some(now) && created).then_some(s)
        })
        .await;
        let runs = spans(w, id).await;
        let missed: Vec<u64> = runs.iter().map(|r| r.0).filter(|t| *t + 5000 < now).collect();
        assert_eq!(missed.len() as u64, want, "{id}: {runs:?}");
        // The latest missed firings, not the oldest.
        assert_eq!(
            *missed.last().unwrap(),
            (now.saturating_sub(5001) / 10_000) * 10_000,
            "{id}: {runs:?}"
        );
        let total = s["fired"].as_u64().unwrap() + s["skipped"].as_u64().unwrap();
        assert!(total >= 10, "{id}: every missed firing was accounted: {s}");
    }
    wk.signal("TERM");
    wk.wait_exit(LONG).await;
    cleanup(&w.cfg).await;
}

/// `buffer_one` holds a firing while the run before it goes on; when that run has ended, the
/// held firing starts before any later one (found by the simulator: the firing pass ran before
/// the buffer's and started a fresh firing ahead of the held one, which then ran after it).
/// The state is set in Redis as a replica would leave it: the last run ended, a firing held,
/// the next firing due; then the schedule is unpaused.
#[tokio::test]
async fn a_held_buffer_one_firing_starts_before_any_later_firing() {
    let w = World::new("scheld", |_| {}).await;
    let mut wk = w.worker(WORKER, "w1", "");
    w.wait_registered("chain").await;
    let body = json!({"id": "held", "workflow": "chain", "input": {"steps": 1}, "every_secs": 1,
        "overlap": "buffer_one"});
    assert_eq!(w.post("/v1/schedules", body).await.0, 201);
    assert_eq!(w.post("/v1/schedules/held/pause", json!({})).await.0, 200);
    let now = w.store.server_time().await.unwrap();
    let second = (now / 1000) * 1000;
    let (held, due) = (second - 3000, second - 1000);
    let keys = w.store.keys();
    let key = keys.schedule("held");
    // The last run: one that ran and ended (the firing before the held one).
    let (code, body) = w
        .post(
            "/v1/runs",
            json!({"workflow": "chain", "input": {"steps": 1}, "thread_id": "held-prev"}),
        )
        .await;
    assert_eq!(code, 201, "{body}");
    let prev = savepoint_core::ids::ThreadId::new("held-prev".to_owned()).unwrap();
    w.wait_status(&prev, &["completed"], LONG).await;
    let cmds = [
        redis::cmd("HSET")
            .arg(&key)
            .arg("last")
            .arg("held-prev")
            .arg("last_at")
            .arg(held - 1000)
            .arg("buffered")
            .arg(held)
            .arg("next")
            .arg(due)
            .clone(),
        redis::cmd("ZADD")
            .arg(keys.schedule_buffered())
            .arg(held)
            .arg("held")
            .clone(),
        redis::cmd("ZADD")
            .arg(keys.schedule_next())
            .arg(due)
            .arg("held")
            .clone(),
        redis::cmd("HDEL").arg(&key).arg("paused").arg("note").clone(),
    ];
    for c in cmds {
        let _: () = w.store.query(&c).await.unwrap();
    }
    let w = &w;
    let runs = wait_until(LONG, "the held firing ran", || async move {
        let runs = spans(w, "held").await;
        let started = runs.iter().any(|(at, r)| *at == held && r["status"] == "completed");
        (started && runs.len() >= 2).then_some(runs)
    })
    .await;
    assert_eq!(w.post("/v1/schedules/held/pause", json!({})).await.0, 200);
    // In firing order, each run was created once the one before it had ended (a completed
    // run's last update is its end).
    for pair in runs.windows(2) {
        let (a, b) = (&pair[0].1, &pair[1].1);
        assert!(
            a["status"] == "completed" && b["created_at"].as_u64() >= a["updated_at"].as_u64(),
            "a later firing started before the held one ended: {runs:?}"
        );
    }
    assert_eq!(runs[0].0, held, "{runs:?}");
    wk.signal("TERM");
    wk.wait_exit(LONG).await;
    cleanup(&w.cfg).await;
}

/// Every worker gone at once (a deploy that replaced them all; here a SIGKILL with a 2 s
/// registration): an every-second `allow_all` schedule waits instead of skipping, and once a
/// worker registers the firings it missed (within the catch-up window) run as themselves:
/// every second from the first firing to the last has one run, none is skipped, all complete.
#[tokio::test]
async fn a_schedule_waits_while_no_live_worker_serves_its_workflow() {
    let w = World::new("scgap", |c| c.worker_ttl_ms = 2000).await;
    let mut wk = w.worker(WORKER, "w1", "");
    w.wait_registered("chain").await;
    let body = json!({"id": "gap", "workflow": "chain", "input": {"steps": 1}, "every_secs": 1,
        "overlap": "allow_all", "catchup": "all", "catchup_limit": 100});
    assert_eq!(w.post("/v1/schedules", body).await.0, 201);
    let w = &w;
    let schedule = || async move { w.get("/v1/schedules/gap").await.1 };
    wait_until(LONG, "the schedule fired twice", || async move {
        (schedule().await["fired"].as_u64() >= Some(2)).then_some(())
    })
    .await;
    wk.signal("KILL");
    wk.wait_exit(LONG).await;
    wait_until(LONG, "no live worker serves chain", || async move {
        w.store.catalog_entry("chain").await.ok()?.is_none().then_some(())
    })
    .await;
    // From then on the schedule is not moved on: its next firing falls behind the clock.
    let waited = wait_until(LONG, "the schedule waits for a worker", || async move {
        let s = schedule().await;
        let now = w.store.server_time().await.ok()?;
        (s["next_at"].as_u64()? + 3000 < now).then_some(s)
    })
    .await;
    assert_eq!(waited["skipped"], 0, "no firing is skipped while it waits: {waited}");
    let mut wk2 = w.worker(WORKER, "w2", "");
    let back = w.store.server_time().await.unwrap();
    let s = wait_until(LONG, "the schedule caught up", || async move {
        let s = schedule().await;
        (s["next_at"].as_u64()? > back + 1000).then_some(s)
    })
    .await;
    assert_eq!(s["skipped"], 0, "{s}");
    let runs = wait_until(LONG, "every run the schedule started completed", || async move {
        // (Every run a move decided created: none pending.)
        let created = w.store.schedule_get("gap").await.ok()??.pending.is_empty();
        let runs = spans(w, "gap").await;
        (created && runs.iter().all(|r| r.1["status"] == "completed")).then_some(runs)
    })
    .await;
    let times: Vec<u64> = runs.iter().map(|r| r.0).collect();
    assert!(
        times.windows(2).all(|p| p[1] - p[0] == 1000),
        "a firing has no run: {times:?}"
    );
    assert!(times.len() >= 6, "{times:?}");
    assert!(
        s["fired"].as_u64().unwrap() <= times.len() as u64,
        "each counted firing has its run: {s} {times:?}"
    );
    wk2.signal("TERM");
    wk2.wait_exit(LONG).await;
    cleanup(&w.cfg).await;
}

#[tokio::test]
async fn schedules_are_created_idempotently_triggered_paused_resumed_and_refused_clearly() {
    let w = World::new("scapi", |_| {}).await;
    let mut wk = w.worker(WORKER, "w1", "");
    w.wait_registered("chain").await;
    let body = json!({"id": "nightly", "workflow": "chain", "input": {"steps": 1},
        "cron": "0 30 2 * * *", "timezone": "Europe/Berlin"});
    let (code, s) = w.post("/v1/schedules", body.clone()).await;
    assert_eq!(code, 201, "{s}");
    assert_eq!(s["upcoming"].as_array().map(Vec::len), Some(5), "{s}");
    let gap = s["upcoming"][1].as_u64().unwrap() - s["upcoming"][0].as_u64().unwrap();
    assert!((23 * 3_600_000..=25 * 3_600_000).contains(&gap), "daily: {s}");
    assert_eq!(
        w.post("/v1/schedules", body.clone()).await.0,
        200,
        "the same schedule again"
    );
    let mut other = body.clone();
    other["input"] = json!({"steps": 2});
    assert_eq!(w.post("/v1/schedules", other).await.0, 409);
    for (bad, want) in [
        (json!({"id": "b", "workflow": "chain", "cron": "61 * * * *"}), "cron"),
        (
            json!({"id": "b", "workflow": "chain", "cron": "* * * * *", "timezone": "Mars/Base"}),
            "time zone",
        ),
        (json!({"id": "b", "workflow": "chain"}), "exactly one"),
        (
            json!({"id": "b", "workflow": "nope", "every_secs": 5}),
            "unknown workflow",
        ),
        (
            json!({"id": "b", "workflow": "chain", "every_secs": 5, "overlap": "sometimes"}),
            "overlap",
        ),
        (
            json!({"id": "b c", "workflow": "chain", "every_secs": 5}),
            "schedule id",
        ),
    ] {
        let (code, e) = w.post("/v1/schedules", bad.clone()).await;
        assert!(code == 400 || code == 422, "{bad}: {code} {e}");
        assert!(e["error"].as_str().unwrap_or_default().contains(want), "{bad}: {e}");
    }
    // Trigger: one run now, whatever the timing.
    let (code, t) = w.post("/v1/schedules/nightly/trigger", json!({})).await;
    assert_eq!(code, 201, "{t}");
    let thread = ThreadId::new(t["thread_id"].as_str().unwrap().to_owned()).unwrap();
    assert!(thread.as_str().starts_with("nightly-manual-"), "{t}");
    w.wait_status(&thread, &["completed"], LONG).await;
    // Pause and resume.
    let (_, p) = w
        .post("/v1/schedules/nightly/pause", json!({"note": "maintenance"}))
        .await;
    assert_eq!((p["state"].as_str(), p.get("next_at")), (Some("paused"), None), "{p}");
    let (_, r) = w.post("/v1/schedules/nightly/resume", json!({})).await;
    assert_eq!(r["state"], "active", "{r}");
    assert_eq!(r["next_at"], s["next_at"], "{r}");
    let (_, list) = w.get("/v1/schedules").await;
    assert_eq!(list["schedules"][0]["id"], "nightly", "{list}");
    let del = w
        .http
        .delete(format!("{}/v1/schedules/nightly", w.sched.base_url))
        .send()
        .await
        .unwrap();
    assert_eq!(del.status().as_u16(), 204);
    assert_eq!(w.get("/v1/schedules/nightly").await.0, 404);
    assert_eq!(w.post("/v1/schedules/nightly/trigger", json!({})).await.0, 404);
    wk.signal("TERM");
    wk.wait_exit(LONG).await;
    cleanup(&w.cfg).await;
}

async fn replica_with_keys(w: &World, name: &str, keys: &str) -> (Proc, String) {
    let mut cfg = w.cfg.clone();
    cfg.security.payload_keys = Redacted(keys.to_owned());
    spawn_with(w, name, &cfg).await
}

async fn stored_input(w: &World, id: &str) -> String {
    let raw: Vec<u8> = w
        .store
        .query(redis::cmd("HGET").arg(w.store.keys().schedule(id)).arg("input"))
        .await
        .unwrap();
    String::from_utf8_lossy(&raw).into_owned()
}

/// Key rotation as the README's runbook says, with schedules (issue 24, hole 2): a schedule
/// created under key `old` (and paused, so only a sweep can reach it) is re-sealed by a
/// scheduler that seals with `new`; once `old` is dropped it still fires. Seventy schedules
/// sealed with a key nobody has any more (`lost`), due earlier than it, do not hold it back:
/// the due query reads past the ones that fail.
#[tokio::test]
async fn schedules_fire_after_the_old_key_is_dropped_and_past_schedules_no_key_opens() {
    let entry = |id: &str| PayloadCodec::new_key_entry(id).unwrap();
    let (old, new, lost) = (entry("old"), entry("new"), entry("lost"));
    let w = World::new("schrot", |c| c.security.payload_keys = Redacted(format!("{new},{old}"))).await;
    // Only the replicas below fire, each with the keys of its step of the runbook.
    w.sched.shutdown_token().cancel();
    let mut wk = w.worker(WORKER, "w1", "");
    w.wait_registered("chain").await;

    let (mut before, base) = replica_with_keys(&w, "keys-old", &old).await;
    let r = w
        .http
        .post(format!("{base}/v1/schedules"))
        .json(
            &json!({"id": "rot", "workflow": "chain", "input": {"steps": 1}, "every_secs": 1, "overlap": "allow_all"}),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 201, "{:?}", r.text().await);
    let r = w
        .http
        .post(format!("{base}/v1/schedules/rot/pause"))
        .json(&json!({"note": "rotation"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 200, "{:?}", r.text().await);
    before.signal("TERM");
    before.wait_exit(LONG).await;
    assert!(stored_input(&w, "rot").await.starts_with("$sp1:old:"));

    // Seventy schedules whose key is lost, due a minute ago (ahead of `rot` in the due index).
    let mut lost_cfg = w.cfg.clone();
    lost_cfg.security.payload_keys = Redacted(lost);
    let lost_store = ScriptStore::connect(&lost_cfg.redis_url, lost_cfg.keys(), lost_cfg.store())
        .await
        .unwrap();
    let spec: String = w
        .store
        .query(redis::cmd("HGET").arg(w.store.keys().schedule("rot")).arg("spec"))
        .await
        .unwrap();
    let now = w.store.server_time().await.unwrap();
    for i in 0..70 {
        lost_store
            .schedule_put(&format!("lost-{i:02}"), &spec, &json!({"steps": 1}), now - 60_000)
            .await
            .unwrap();
    }

    // Step 3 of the runbook: `new` first, `old` second. The replica re-seals as it starts.
    let (mut rotated, _) = replica_with_keys(&w, "keys-new-old", &format!("{new},{old}")).await;
    wait_until(LONG, "the paused schedule is re-sealed with the new key", || {
        let w = &w;
        async move { stored_input(w, "rot").await.starts_with("$sp1:new:").then_some(()) }
    })
    .await;
    rotated.signal("TERM");
    rotated.wait_exit(LONG).await;

    // Step 4: `old` dropped. The schedule fires behind the seventy that cannot.
    let (mut after, base) = replica_with_keys(&w, "keys-new", &new).await;
    let resumed_at = w.store.server_time().await.unwrap();
    let r = w
        .http
        .post(format!("{base}/v1/schedules/rot/resume"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 200, "{:?}", r.text().await);
    wait_until(LONG, "a run of the rotated schedule completes", || {
        let (http, base) = (w.http.clone(), base.clone());
        async move {
            let runs = runs_of(&http, &base, "rot").await;
            runs.iter()
                .any(|(at, r)| at + 1000 > resumed_at && r["status"] == "completed")
                .then_some(())
        }
    })
    .await;
    let (s, body) = {
        let r = w.http.get(format!("{base}/v1/schedules/lost-00")).send().await.unwrap();
        (r.status().as_u16(), r.text().await.unwrap_or_default())
    };
    assert_eq!(s, 500, "a schedule no key opens says why: {body}");
    assert!(body.contains("which is not configured here"), "{body}");
    let started = runs_of(&w.http, &base, "lost-00").await;
    assert!(
        started.is_empty(),
        "nothing ran for a schedule no key opens: {started:?}"
    );
    after.signal("TERM");
    after.wait_exit(LONG).await;
    wk.signal("TERM");
    wk.wait_exit(LONG).await;
    cleanup(&w.cfg).await;
}

/// `overlap: skip` across two replicas (issue 24, hole 8). Replica A judges the second firing
/// busy (the first run waits for an answer) and skips it, but stalls before moving the
/// schedule on; meanwhile the first run ends, and replica B, starting, judges the same firing
/// free, starts it and stalls longer. A's move lands first. Before, B's run was created but
/// never became the schedule's last run, so the third firing started a second run beside it;
/// now only the replica whose move lands creates runs, and at most one run is ever open.
#[tokio::test]
async fn overlap_skip_holds_when_two_replicas_judge_one_firing_differently() {
    let w = World::new("scskip2", |_| {}).await;
    w.sched.shutdown_token().cancel();
    let mut wk = w.worker(WORKER, "w1", "");
    w.wait_registered("approval").await;
    let (mut a, base) = spawn_replica(&w, "replica-a", "schedule.before_advance=pause(6000)").await;
    let r = w
        .http
        .post(format!("{base}/v1/schedules"))
        .json(&json!({"id": "sk", "workflow": "approval", "input": {"why": "overlap"}, "every_secs": 10, "overlap": "skip"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 201, "{:?}", r.text().await);
    let schedule = || {
        let (http, base) = (w.http.clone(), base.clone());
        async move {
            http.get(format!("{base}/v1/schedules/sk"))
                .send()
                .await
                .ok()?
                .json::<Value>()
                .await
                .ok()
        }
    };
    // The first firing's run, waiting for its answer; the schedule moved on to the second.
    let (first, x0) = wait_until(LONG, "the first firing's run waits", || {
        let (http, base) = (w.http.clone(), base.clone());
        async move {
            let runs = runs_of(&http, &base, "sk").await;
            let (at, r) = runs.first()?;
            (r["status"] == "waiting").then(|| (*at, r["thread_id"].as_str().unwrap_or_default().to_owned()))
        }
    })
    .await;
    let second = wait_until(LONG, "the schedule moved on to its second firing", || async {
        let s = schedule().await?;
        s["next_at"].as_u64().filter(|n| *n > first)
    })
    .await;
    // A reads the second firing (its tick is at most 250 ms) and stalls 6 s before its move.
    wait_until(LONG, "the second firing is due and read", || async {
        (w.store.server_time().await.ok()? > second + 700).then_some(())
    })
    .await;
    let r = w
        .http
        .post(format!("{base}/v1/runs/{x0}/resume"))
        .json(&json!({"value": true}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 202, "{:?}", r.text().await);
    wait_until(LONG, "the first run completes", || {
        let (http, url) = (w.http.clone(), format!("{base}/v1/runs/{x0}"));
        async move {
            let run: Value = http.get(url).send().await.ok()?.json().await.ok()?;
            (run["status"] == "completed").then_some(())
        }
    })
    .await;
    // B comes up while A still stalls, finds the first run ended, and stalls 8 s.
    let (mut b, _) = spawn_replica(&w, "replica-b", "schedule.before_advance=pause(8000)").await;
    assert!(
        w.store.server_time().await.unwrap() < second + 5000,
        "replica B came up too late to race A"
    );
    let third = second + 10_000;
    let runs = wait_until(Duration::from_secs(60), "the third firing's run exists", || {
        let (http, base) = (w.http.clone(), base.clone());
        async move {
            let runs = runs_of(&http, &base, "sk").await;
            runs.iter().any(|(at, _)| *at == third).then_some(runs)
        }
    })
    .await;
    let open: Vec<&Value> = runs
        .iter()
        .map(|(_, r)| r)
        .filter(|r| !["completed", "failed", "cancelled"].contains(&r["status"].as_str().unwrap_or("")))
        .collect();
    assert!(
        runs.iter().all(|(at, _)| *at != second),
        "the firing A skipped has a run (B's, untracked): {runs:?}"
    );
    assert_eq!(open.len(), 1, "overlap skip: one open run at a time: {open:?}");
    let s = schedule().await.unwrap();
    assert_eq!(
        s["last_run"], open[0]["thread_id"],
        "the open run is the schedule's last: {s}"
    );
    for p in [&mut a, &mut b, &mut wk] {
        p.signal("KILL");
        p.wait_exit(LONG).await;
    }
    cleanup(&w.cfg).await;
}
