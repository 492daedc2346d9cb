//! Submitting the runs, waiting for them, and measuring what they cost.

use anyhow::{bail, Context};
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Semaphore;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use savepoint_core::ids::ThreadId;
use savepoint_runtime::config::Config;
use savepoint_store::ScriptStore;

use super::receiver;
use super::stats::Report;
use super::track;
use super::LoadgenArgs;

/// The input of the `i`th run of the chosen workflow (`hook`: the webhook receiver URL).
fn input(args: &LoadgenArgs, i: usize, hook: &str) -> Result<Value, anyhow::Error> {
    Ok(match args.workflow.as_str() {
        "chain" => json!({"steps": args.steps, "payload_bytes": args.payload_bytes, "nap_ms": args.nap_ms}),
        "webhook" => json!({
            "url": hook, "steps": args.steps,
            "effect_at": args.effect_at.unwrap_or(args.steps / 2), "policy": args.policy,
        }),
        "invoice" => {
            json!({"invoice_id": format!("LG-{}-{i}", &savepoint_core::entropy::uuid().simple().to_string()[..8])})
        }
        other => bail!("unknown workflow {other:?}: use chain, webhook or invoice"),
    })
}

/// Runs the load and returns the report (the caller prints it and picks the exit code).
pub async fn run(cfg: Config, api: &str, args: LoadgenArgs) -> anyhow::Result<Report> {
    run_with_token(cfg, api, None, args).await
}

/// [`run`] against a scheduler that requires an API token (`operate` or higher).
pub async fn run_with_token(cfg: Config, api: &str, token: Option<&str>, args: LoadgenArgs) -> anyhow::Result<Report> {
    let store = ScriptStore::connect(&cfg.redis_url, cfg.keys(), cfg.store())
        .await
        .context("connecting to Redis")?;
    let stop = CancellationToken::new();
    let (hook, deliveries) = match (&args.webhook_url, args.workflow.as_str()) {
        (Some(u), _) => (u.clone(), None),
        (None, "webhook") => {
            let (u, d) = receiver::start(stop.clone()).await?;
            (u, Some(d))
        }
        _ => (String::new(), None),
    };
    let mut headers = reqwest::header::HeaderMap::new();
    if let Some(t) = token {
        let mut v = reqwest::header::HeaderValue::from_str(&format!("Bearer {t}"))?;
        v.set_sensitive(true);
        headers.insert(reqwest::header::AUTHORIZATION, v);
    }
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(64)
        .default_headers(headers)
        .build()?;
    let permits = Arc::new(Semaphore::new(args.inflight.max(1)));
    let tracker = track::Tracker::start(store.clone(), stop.clone());
    let prefix = format!("lg-{}", &savepoint_core::entropy::uuid().simple().to_string()[..8]);
    let started = Instant::now();
    let interval = (args.rate > 0.0).then(|| Duration::from_secs_f64(1.0 / args.rate));
    let mut submits = tokio::task::JoinSet::new();
    for i in 0..args.runs {
        if let Some(iv) = interval {
            let due = started + iv.mul_f64(i as f64);
            tokio::time::sleep_until(due).await;
        }
        let permit = permits.clone().acquire_owned().await?;
        let thread = ThreadId::new(format!("{prefix}-{i}"))?;
        let mut body =
            json!({"workflow": args.workflow, "input": input(&args, i, &hook)?, "thread_id": thread.as_str()});
        if args.flow_keys > 0 {
            body["flow"] = json!({"key": format!("lg{}", i % args.flow_keys), "limit": args.flow_limit});
        }
        let (http, url, tracker) = (http.clone(), format!("{api}/v1/runs"), tracker.clone());
        submits.spawn(async move {
            submit(&http, &url, &body).await?;
            tracker.add(thread, permit);
            Ok::<(), anyhow::Error>(())
        });
        while let Some(r) = submits.try_join_next() {
            r??;
        }
    }
    while let Some(r) = submits.join_next().await {
        r??;
    }
    let all_done = tracker.wait_all(Duration::from_secs(args.timeout)).await;
    stop.cancel();
    let threads = tracker.threads();
    let mut report = track::measure(&store, &threads, args.sample).await?;
    report.workflow = args.workflow.clone();
    if let Some(d) = deliveries {
        report.repeated_deliveries = d.snapshot().into_iter().filter(|(_, n)| *n > 1).collect();
    }
    if !all_done {
        eprintln!("loadgen: timed out after {} s waiting for runs", args.timeout);
    }
    Ok(report)
}

/// Starts one run, as a well-behaved client does: a 503 (the store busy past its command
/// timeout) or a 429 is retried with a growing back-off (the start is idempotent on its thread
/// id); any other refusal ends the load.
async fn submit(http: &reqwest::Client, url: &str, body: &serde_json::Value) -> anyhow::Result<()> {
    let mut delay = Duration::from_millis(50);
    for _ in 0..20 {
        let resp = http.post(url).json(body).send().await?;
        let status = resp.status();
        if status.is_success() {
            return Ok(());
        }
        if status != reqwest::StatusCode::SERVICE_UNAVAILABLE && status != reqwest::StatusCode::TOO_MANY_REQUESTS {
            bail!("start failed: HTTP {status}: {}", resp.text().await.unwrap_or_default());
        }
        tokio::time::sleep(delay).await;
        delay = (delay * 2).min(Duration::from_secs(2));
    }
    bail!("start failed: still refused after 20 tries (HTTP 503/429)")
}
