//! What crash tests cannot see, done for real against RabbitMQ and Redis with worker
//! processes: a worker paused past its lease, a worker cut off from Redis (but not from the
//! provider) in the middle of a slow effect, a mixed fleet of two builds sharing one queue
//! while one of them is killed and brought back, and a poison run that kills every worker
//! at the same step. Effects are counted at the provider.

use serde_json::json;
use std::time::Duration;

use savepoint_cli::loadgen::receiver::{self, ReceiverOptions};
use savepoint_core::ids::{EffectKey, ThreadId};
use savepoint_integration_tests::procs::{free_port, killed_by_signal, scrape, Proc};
use savepoint_integration_tests::proxy::Proxy;
use savepoint_integration_tests::scenario::World;
use savepoint_integration_tests::wait_until;
use savepoint_store::EffectRecord;

const WORKER: &str = env!("CARGO_BIN_EXE_it-worker");
const LONG: Duration = Duration::from_secs(40);

/// `savepoint_slices_total{end="deadline"}` of a worker's metrics endpoint.
const DEADLINE_SLICES: &str = "savepoint_slices_total{end=\"deadline\"}";

/// A black-holing proxy in front of the world's Redis (`cut()` partitions whoever uses it).
async fn redis_proxy(w: &World) -> Proxy {
    let redis_addr = w
        .cfg
        .redis_url
        .trim_start_matches("redis://")
        .parse()
        .expect("redis host:port");
    Proxy::start(redis_addr).await
}

/// A webhook provider that answers after `delay` and checks no fencing tokens.
async fn provider(stop: &tokio_util::sync::CancellationToken, delay: Duration) -> (String, receiver::Deliveries) {
    let opts = ReceiverOptions {
        delay,
        check_tokens: false,
    };
    receiver::start_with(stop.clone(), opts).await.unwrap()
}

/// Cuts worker A off (through `proxy`), starts worker B, and waits until B has taken the run
/// over and blocked it as in doubt on `key`. B runs until the handle is dropped.
async fn cut_off_and_blocked_in_doubt(w: &World, proxy: &Proxy, t: &ThreadId, key: &str) -> Proc {
    proxy.cut();
    let b = w.worker(WORKER, "wb", "");
    let run = w.wait_status(t, &["blocked"], LONG).await;
    assert_eq!(
        run["blocked_reason"],
        json!(format!("effect {key} outcome unknown")),
        "{run}"
    );
    b
}

async fn wait_metric(addr: &str, series: &str, at_least: f64) {
    wait_until(LONG, &format!("{series} >= {at_least} at {addr}"), || async {
        scrape(addr, series).await.filter(|v| *v >= at_least)
    })
    .await;
}

/// A worker paused (a GC-like stall) between recording the email's intent and sending it,
/// for longer than its lease: another worker takes the run over and, the outcome being
/// unknown, blocks it; the operator checks the provider (nothing sent) and resolves it as not
/// applied; the email goes out once. When the paused worker wakes, its local lease deadline
/// has passed and it sends nothing.
#[tokio::test]
async fn paused_worker_does_not_perform_after_losing_its_lease() {
    let w = World::new("fp", |_| {}).await;
    let a_http = format!("127.0.0.1:{}", free_port());
    let _a = w.worker_env(
        WORKER,
        "wa",
        "effect.after_intent=pause(6000)@2",
        &[("SAVEPOINT_WORKER_HTTP_ADDR", &a_http)],
    );
    w.wait_registered("invoice").await;
    let invoice = format!("INV-{}", &uuid::Uuid::new_v4().simple().to_string()[..8]);
    let t = w.start("invoice", json!({"invoice_id": invoice})).await;
    let email = EffectKey::new(format!("email:{t}")).unwrap();
    // A holds the email's intent and is paused right after taking it.
    wait_until(LONG, "worker A to take the email's intent", || async {
        matches!(
            w.store.effect_state(&email).await.unwrap(),
            Some(EffectRecord::Intent(_))
        )
        .then_some(())
    })
    .await;
    let _b = w.worker(WORKER, "wb", "");
    let run = w.wait_status(&t, &["blocked"], LONG).await;
    assert_eq!(
        run["blocked_reason"],
        json!(format!("effect {email} outcome unknown")),
        "{run}"
    );
    assert_eq!(
        w.effect_counts().await.get(email.as_str()),
        None,
        "the operator looks at the provider: not sent"
    );
    let (code, body) = w
        .post(
            &format!("/v1/runs/{t}/effects/{email}/resolve"),
            json!({"applied": false}),
        )
        .await;
    assert_eq!(code, 202, "{body}");
    let run = w.wait_status(&t, &["completed"], LONG).await;
    assert_eq!(run["output"]["total_cents"], 125_000);
    // A wakes after its pause, finds its local lease deadline passed, and stops.
    wait_metric(&a_http, DEADLINE_SLICES, 1.0).await;
    let counts = w.effect_counts().await;
    assert_eq!(counts.get(email.as_str()), Some(&1), "email sent once: {counts:?}");
    assert_eq!(counts.get(&format!("ledger:{invoice}")), Some(&1), "{counts:?}");
}

/// A worker cut off from Redis (a black-holing proxy between it and Redis; the provider is
/// still reachable) in the middle of a slow webhook call. Its local lease deadline passes
/// before the lease can be taken over, so it drops the call in flight; the run is taken
/// over, blocked as in doubt, resolved "not applied" after checking the provider (nothing
/// applied), and performed once by the new owner, with a higher fencing token. The provider
/// here checks no tokens: the deadline alone keeps the stale call from landing.
#[tokio::test]
async fn worker_cut_off_from_redis_drops_its_call_in_flight() {
    let w = World::new("fc", |_| {}).await;
    let stop = tokio_util::sync::CancellationToken::new();
    let (hook, provider) = provider(&stop, Duration::from_secs(3)).await;
    let proxy = redis_proxy(&w).await;
    let a_http = format!("127.0.0.1:{}", free_port());
    let redis_via_proxy = proxy.url("redis");
    let _a = w.worker_env(
        WORKER,
        "wa",
        "",
        &[
            ("SAVEPOINT_REDIS_URL", &redis_via_proxy),
            ("SAVEPOINT_WORKER_HTTP_ADDR", &a_http),
        ],
    );
    w.wait_registered("webhook").await;
    let t = w
        .start(
            "webhook",
            json!({"url": hook, "steps": 2, "effect_at": 1, "policy": "block"}),
        )
        .await;
    let key = format!("webhook:{t}:1");
    wait_until(LONG, "A's webhook call to reach the provider", || async {
        (provider.received() >= 1).then_some(())
    })
    .await;
    let _b = cut_off_and_blocked_in_doubt(&w, &proxy, &t, key.as_str()).await;
    wait_metric(&a_http, DEADLINE_SLICES, 1.0).await;
    assert_eq!(
        provider.snapshot().get(&key),
        None,
        "nothing applied when the operator looks"
    );
    let (code, body) = w
        .post(
            &format!("/v1/runs/{t}/effects/{key}/resolve"),
            json!({"applied": false}),
        )
        .await;
    assert_eq!(code, 202, "{body}");
    w.wait_status(&t, &["completed"], LONG).await;
    wait_until(LONG, "the provider to finish every request", || async {
        (provider.in_flight() == 0).then_some(())
    })
    .await;
    let applied = provider.applied_log();
    assert_eq!(applied.len(), 1, "applied once: {applied:?}");
    let a_fence = 1;
    assert!(
        applied[0].1.is_some_and(|f| f > a_fence),
        "applied by the new owner's attempt: {applied:?}"
    );
    assert_eq!(provider.dropped(), 1, "the cut-off worker dropped its call");
    proxy.restore();
    stop.cancel();
}

/// A worker cut off from Redis (a black-holing proxy) right after taking a webhook's intent
/// and before calling it: its local lease deadline passes, so it stops without calling, and
/// it cannot free the intent. Another worker takes the run over and, the intent looking like
/// a call that may have started, blocks it as in doubt. When the partition heals, the
/// cut-off worker records in the run that it never called the effect: the run goes on by
/// itself, no operator involved, and the provider receives the webhook once.
#[tokio::test]
async fn an_intent_its_holder_could_not_free_in_a_partition_does_not_block_the_run() {
    let w = World::new("fu", |_| {}).await;
    let stop = tokio_util::sync::CancellationToken::new();
    let (hook, provider) = provider(&stop, Duration::ZERO).await;
    let proxy = redis_proxy(&w).await;
    let redis_via_proxy = proxy.url("redis");
    let _a = w.worker_env(
        WORKER,
        "wa",
        "effect.after_intent=pause(5000)@1",
        &[("SAVEPOINT_REDIS_URL", &redis_via_proxy)],
    );
    w.wait_registered("webhook").await;
    let t = w
        .start(
            "webhook",
            json!({"url": hook, "steps": 2, "effect_at": 1, "policy": "block"}),
        )
        .await;
    let key = EffectKey::new(format!("webhook:{t}:1")).unwrap();
    wait_until(LONG, "worker A to take the webhook's intent", || async {
        matches!(w.store.effect_state(&key).await.unwrap(), Some(EffectRecord::Intent(_))).then_some(())
    })
    .await;
    let _b = cut_off_and_blocked_in_doubt(&w, &proxy, &t, key.as_str()).await;
    assert_eq!(provider.received(), 0, "A never called the provider");
    proxy.restore();
    w.wait_status(&t, &["completed"], LONG).await;
    wait_until(LONG, "the provider to finish every request", || async {
        (provider.in_flight() == 0).then_some(())
    })
    .await;
    let applied = provider.applied_log();
    assert_eq!(applied.len(), 1, "applied once: {applied:?}");
    let events = w.store.events(&t, 200).await.unwrap();
    assert!(
        events
            .iter()
            .any(|e| e.typ == "effect_resolved" && e.detail.contains("never called")),
        "the run says why it went on: {events:?}"
    );
    stop.cancel();
}

/// Two builds share one queue: `old` serves chain v1 and approval, `new` serves chain v1..=2
/// and invoice. Runs of every kind complete (each build gives back what it cannot run).
/// Then the new build is killed: runs started at v2 (its registration has not expired yet)
/// and invoice runs wait, visibly, without being blocked; once the registration expires new
/// chain runs start at v1 again (a rollback) and complete on the old build; when the new
/// build comes back, everything that waited completes.
#[tokio::test]
async fn mixed_fleet_and_rolling_deploy_block_nothing() {
    let w = World::new("fm", |c| c.worker_ttl_ms = 3000).await;
    let t0 = std::time::Instant::now();
    let phase = |what: &str| {
        use std::io::Write;
        let _ = writeln!(
            std::io::stderr(),
            "mixed fleet: {what} at {:.1}s",
            t0.elapsed().as_secs_f64()
        );
    };
    let mut old = w.worker_env(WORKER, "old", "", &[("IT_WORKFLOWS", "chain@1,approval")]);
    let mut new = w.worker_env(WORKER, "new", "", &[("IT_WORKFLOWS", "chain@2:1,invoice")]);
    wait_until(LONG, "both builds registered", || async {
        let c = w.store.catalog().await.unwrap();
        (c.get("chain").map(|e| e.version) == Some(2) && c.contains_key("approval") && c.contains_key("invoice"))
            .then_some(())
    })
    .await;
    let mut runs = Vec::new();
    for i in 0..10 {
        runs.push(w.start("chain", json!({"steps": 3})).await);
        runs.push(w.start("invoice", json!({"invoice_id": format!("INV-M{i}")})).await);
    }
    let approvals: Vec<ThreadId> = {
        let mut v = Vec::new();
        for _ in 0..3 {
            v.push(w.start("approval", json!({})).await);
        }
        v
    };
    for t in &approvals {
        w.wait_status(t, &["waiting"], LONG).await;
        let (code, body) = w.post(&format!("/v1/runs/{t}/resume"), json!({"value": "yes"})).await;
        assert_eq!(code, 202, "{body}");
    }
    for t in runs.iter().chain(&approvals) {
        w.wait_status(t, &["completed"], LONG).await;
    }
    assert_eq!(
        w.run(&runs[0]).await["workflow_version"],
        2,
        "new chain runs start at the newest served version"
    );

    // The new build dies; v2 and invoice runs started now wait for it, visibly.
    new.signal("KILL");
    assert!(killed_by_signal(&new.wait_exit(LONG).await));
    let mut waiting = Vec::new();
    for i in 0..5 {
        waiting.push(w.start("chain", json!({"steps": 3})).await);
        waiting.push(w.start("invoice", json!({"invoice_id": format!("INV-W{i}")})).await);
    }
    for t in &waiting {
        let run = wait_until(LONG, "the run to say what it waits for", || async {
            let run = w.run(t).await;
            run.get("waiting_for").is_some().then_some(run)
        })
        .await;
        assert_eq!(run["status"], "pending", "{run}");
        let wf = run["workflow"].as_str().unwrap().to_owned();
        let want = format!("waiting for a worker that serves {wf} v{}", run["workflow_version"]);
        assert_eq!(run["waiting_for"], json!(want), "{run}");
    }
    phase("runs of the dead build wait visibly");
    // Rollback: once the dead build's registration expires, new runs start at v1.
    wait_until(LONG, "the catalog to forget the dead build", || async {
        let c = w.store.catalog().await.unwrap();
        (c.get("chain").map(|e| e.version) == Some(1)).then_some(())
    })
    .await;
    // The API trusts its copy of the catalog for up to a second.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let v1 = w.start("chain", json!({"steps": 3})).await;
    assert_eq!(w.run(&v1).await["workflow_version"], 1);
    w.wait_status(&v1, &["completed"], LONG).await;

    phase("rolled back to v1");
    // The new build comes back: everything that waited completes; nothing was blocked.
    let _new2 = w.worker_env(WORKER, "new2", "", &[("IT_WORKFLOWS", "chain@2:1,invoice")]);
    for t in &waiting {
        let run = w
            .wait_status(t, &["completed", "blocked", "failed"], Duration::from_secs(60))
            .await;
        assert_eq!(run["status"], "completed", "{run}");
    }
    phase("waiting runs completed after the build came back");
    let (_, blocked) = w.get("/v1/runs?status=blocked").await;
    assert_eq!(blocked["runs"], json!([]), "nothing blocked");
    old.signal("TERM");
    let _ = old.wait_exit(LONG).await;
}

/// A step that kills whatever worker runs it is retaken once per lease, forever, unless the
/// run is stopped: after `max_crashes` takeovers at the same position the run is blocked as a
/// poison run naming the step and the workers; after a fix it is retried and completes.
#[tokio::test]
async fn poison_run_is_blocked_then_retried_after_a_fix() {
    let w = World::new("fx", |c| c.max_crashes = 3).await;
    let mut victim = w.worker(WORKER, "p0", "step.before_commit=abort");
    w.wait_registered("invoice").await;
    let t = w.start("invoice", json!({"invoice_id": "INV-POISON"})).await;
    let (mut crashes, deadline) = (0, std::time::Instant::now() + Duration::from_secs(90));
    // Each worker dies at the step; a new one takes the run over after the lease expires,
    // until the claim refuses to take it over again.
    let run = loop {
        assert!(
            std::time::Instant::now() < deadline,
            "not blocked after {crashes} crashes"
        );
        let run = w.run(&t).await;
        if run["status"] == "blocked" {
            break run;
        }
        if !victim.is_running() {
            crashes += 1;
            victim = w.worker(WORKER, &format!("p{crashes}"), "step.before_commit=abort");
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    };
    assert_eq!(crashes, 3, "blocked at the third takeover at the same step");
    let reason = run["blocked_reason"].as_str().unwrap();
    assert!(
        reason.starts_with("crashed 3 times at entry 0 (read_pdf) without progress; workers: "),
        "{reason}"
    );
    assert_eq!(run["step"], 0);
    // A fixed build is deployed; the operator retries the run.
    victim.signal("KILL");
    let _fixed = w.worker(WORKER, "fixed", "");
    let (code, body) = w.post(&format!("/v1/runs/{t}/retry"), json!({})).await;
    assert_eq!(code, 202, "{body}");
    let run = w.wait_status(&t, &["completed"], LONG).await;
    assert_eq!(run["output"]["total_cents"], 125_000);
}

/// The partition count is fixed when a namespace is first used: a process configured with
/// another one refuses to start with a clear error and the bad-config exit code.
#[tokio::test]
async fn a_process_with_another_partition_count_refuses_to_start() {
    let w = World::new("fl", |_| {}).await;
    let out = tokio::process::Command::new(WORKER)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("SAVEPOINT_AMQP_URL", &w.cfg.amqp_url)
        .env("SAVEPOINT_REDIS_URL", &w.cfg.redis_url)
        .env("SAVEPOINT_NAMESPACE", &w.cfg.namespace)
        .env("SAVEPOINT_PARTITIONS", (w.cfg.partitions * 2).to_string())
        .env("SAVEPOINT_WORKER_HTTP_ADDR", "")
        .output();
    let out = tokio::time::timeout(LONG, out).await.expect("exits").expect("runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "exit code of a bad config: {stderr}");
    let want = format!(
        "namespace {} was created with {} partitions but this process is configured with {}",
        w.cfg.namespace,
        w.cfg.partitions,
        w.cfg.partitions * 2
    );
    assert!(stderr.contains(&want), "{stderr}");
    // The right count still starts.
    let _ok = w.worker(WORKER, "ok", "");
    w.wait_registered("invoice").await;
}
