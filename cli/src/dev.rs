//! `savepoint dev`: a scheduler and two workers in one process against the configured
//! RabbitMQ and Redis, or, when either is not reachable (or with `--embedded`), on the embedded
//! backend: the same engine with its store and queue in this process. By default it first
//! plays the seed's story: an invoice run whose worker crashes right after the ledger post,
//! resumed on the other worker, printing each step and effect and how many times each effect
//! was applied.

use savepoint_store::cluster::redact_list;
use std::collections::BTreeMap;
use std::time::Duration;
use tokio::time::Instant;

use anyhow::{bail, Context};
use serde_json::{json, Value};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use savepoint_core::failpoints::Failpoints;
use savepoint_core::ids::ThreadId;
use savepoint_core::journal::Entry;
use savepoint_demo::{registry, EffectLog};
use savepoint_runtime::config::Config;
use savepoint_store::{RunEvent, RunHeader, RunStatus, ScriptStore};
use savepoint_worker::WorkerOptions;

/// Options of `savepoint dev`.
#[derive(Debug, Clone, clap::Args)]
pub struct DevArgs {
    /// Skip the crash-and-resume story; just serve.
    #[arg(long)]
    pub no_story: bool,
    /// Exit after the story instead of serving (used by tests and CI).
    #[arg(long)]
    pub exit_after_story: bool,
    /// Run on the embedded backend (store and queue in this process, nothing persisted)
    /// even if RabbitMQ and Redis are reachable.
    #[arg(long, conflicts_with = "require_services")]
    pub embedded: bool,
    /// Fail instead of falling back to the embedded backend when RabbitMQ or Redis is not
    /// reachable.
    #[arg(long)]
    pub require_services: bool,
}

/// `host:port` of a service URL (`scheme://[user[:pass]@]host[:port][/…]`).
fn endpoint(url: &str, default_port: u16) -> Option<String> {
    let u = url::Url::parse(url).ok()?;
    let host = u.host_str().filter(|h| !h.is_empty())?;
    Some(format!("{host}:{}", u.port().unwrap_or(default_port)))
}

/// The first node a URL names: the first seed of a Redis Cluster URL, the first of a
/// comma-separated list of AMQP nodes, or the URL itself.
fn first_node(url: &str) -> String {
    match savepoint_store::cluster::seed_urls(url) {
        Some(Ok(seeds)) if !seeds.is_empty() => seeds[0].clone(),
        _ => url.split(',').next().unwrap_or(url).trim().to_owned(),
    }
}

/// Why a service cannot be reached (`None`: its first node accepts TCP connections).
async fn unreachable(url: &str, default_port: u16) -> Option<String> {
    if savepoint_core::mem::instance_name(url).is_some() {
        return None;
    }
    let Some(addr) = endpoint(&first_node(url), default_port) else {
        return Some(format!("cannot read a host from {url:?}"));
    };
    match tokio::time::timeout(Duration::from_millis(800), tokio::net::TcpStream::connect(&addr)).await {
        Ok(Ok(_)) => None,
        Ok(Err(e)) => Some(format!("{addr}: {e}")),
        Err(_) => Some(format!("{addr}: no answer in 800 ms")),
    }
}

/// Picks the backend: the configured services, or the embedded one (`--embedded`, or a
/// service not reachable and `--require-services` not given). Says which.
async fn choose_backend(cfg: &mut Config, args: &DevArgs) -> anyhow::Result<()> {
    let mut why = Vec::new();
    if args.embedded {
        why.push("--embedded was given".to_owned());
    } else {
        if let Some(e) = unreachable(&cfg.redis_url, 6379).await {
            why.push(format!("Redis is not reachable ({e})"));
        }
        let amqp_port = if cfg.amqp_url.starts_with("amqps://") {
            5671
        } else {
            5672
        };
        if let Some(e) = unreachable(&cfg.amqp_url, amqp_port).await {
            why.push(format!("RabbitMQ is not reachable ({e})"));
        }
    }
    if why.is_empty() {
        println!(
            "savepoint dev: backend rabbitmq + redis ({} and {})",
            redact_list(&cfg.amqp_url),
            redact_list(&cfg.redis_url)
        );
        return Ok(());
    }
    if args.require_services {
        bail!("{} (and --require-services was given)", why.join("; "));
    }
    let url = format!("{}dev-{}", savepoint_core::mem::SCHEME, std::process::id());
    cfg.redis_url = url.clone();
    cfg.amqp_url = url;
    println!(
        "savepoint dev: backend embedded ({}): the store runs the same Lua scripts in this process \
         and the task queue is in memory; nothing outlives this process. Start RabbitMQ and Redis \
         (or pass --require-services) to run on them.",
        why.join("; ")
    );
    Ok(())
}

struct Fleet {
    stop: CancellationToken,
    handles: Vec<JoinHandle<()>>,
}

fn spawn_worker(
    cfg: &Config,
    name: &str,
    store: &ScriptStore,
    fp: Option<Failpoints>,
    crash: CancellationToken,
    fleet: &mut Fleet,
) {
    let mut cfg = cfg.clone();
    cfg.worker.name = name.to_owned();
    let opts = WorkerOptions {
        registry: registry(store),
        failpoints: fp,
        crash,
        serve_http: false,
        stubs: None,
        wrap_store: None,
    };
    let stop = fleet.stop.clone();
    let name = name.to_owned();
    fleet.handles.push(tokio::spawn(async move {
        if let Err(e) = savepoint_worker::run_with(cfg, opts, stop).await {
            eprintln!("worker {name} stopped: {e}");
        }
    }));
}

fn owner_name(detail: &str) -> String {
    detail.split('-').next().unwrap_or(detail).to_owned()
}

/// Runs `savepoint dev`.
pub async fn run(mut cfg: Config, args: DevArgs) -> anyhow::Result<()> {
    choose_backend(&mut cfg, &args).await?;
    let store = ScriptStore::connect(&cfg.redis_url, cfg.keys(), cfg.store())
        .await
        .context("connecting to the store")?;
    let listener = tokio::net::TcpListener::bind(&cfg.scheduler.http_addr)
        .await
        .with_context(|| format!("binding the API to {}", cfg.scheduler.http_addr))?;
    let api = format!("http://{}", listener.local_addr()?);
    let mut fleet = Fleet {
        stop: CancellationToken::new(),
        handles: Vec::new(),
    };
    let sched_cfg = cfg.clone();
    let stop = fleet.stop.clone();
    fleet.handles.push(tokio::spawn(async move {
        if let Err(e) = savepoint_scheduler::serve(sched_cfg, listener, stop).await {
            eprintln!("scheduler stopped: {e}");
        }
    }));
    println!(
        "savepoint dev: scheduler API on {api} (namespace {:?}, store {}, queue {})",
        cfg.namespace,
        redact_list(&cfg.redis_url),
        redact_list(&cfg.amqp_url)
    );
    if !args.no_story {
        let ok = story(&cfg, &store, &api, &mut fleet).await?;
        if args.exit_after_story {
            fleet.stop.cancel();
            for h in fleet.handles {
                let _ = h.await;
            }
            if !ok {
                bail!("the story did not end as expected");
            }
            return Ok(());
        }
    } else {
        spawn_worker(&cfg, "w1", &store, None, CancellationToken::new(), &mut fleet);
        spawn_worker(&cfg, "w2", &store, None, CancellationToken::new(), &mut fleet);
    }
    let http = cfg.scheduler.http_addr.replace("0.0.0.0", "127.0.0.1");
    println!(
        "\nServing with workers w1 and w2. Console: http://{http}/ui  API docs: http://{http}/docs\nTry:\n  \
         savepoint start approval\n  savepoint list\n  savepoint doctor <thread>\nCtrl-C to stop."
    );
    let term = CancellationToken::new();
    tokio::spawn(savepoint_runtime::shutdown::on_terminate(term.clone()));
    term.cancelled().await;
    fleet.stop.cancel();
    for h in fleet.handles {
        let _ = tokio::time::timeout(Duration::from_secs(15), h).await;
    }
    Ok(())
}

/// The invoice crash story: w1 crashes right after the ledger post, w2 takes the run over,
/// and the effects log shows each effect applied once. True if it ended so.
async fn story(cfg: &Config, store: &ScriptStore, api: &str, fleet: &mut Fleet) -> anyhow::Result<bool> {
    println!("\n== The invoice story: read_pdf → extract_totals → ledger.post → email.send");
    println!("   Worker w1 will crash (as under kill -9) right after the ledger post; w2 resumes the run.\n");
    let crash = CancellationToken::new();
    let fp = Failpoints::parse("effect.after_call=abort@1")?.with_crash_hook({
        let c = crash.clone();
        move |_| c.cancel()
    });
    spawn_worker(cfg, "w1", store, Some(fp), crash.clone(), fleet);
    let http = reqwest::Client::new();
    wait_ready(store, &http, api).await?;
    let thread = start_invoice(&http, api).await?;
    let started = Instant::now();
    narrate(cfg, store, &thread, &crash, started, fleet).await?;
    let (h, journal) = store.get(&thread).await?.context("run vanished")?;
    print_run(&thread, &h, &journal, started);
    let counts = effect_counts(store, &thread).await?;
    let ok = h.status == RunStatus::Completed && counts.len() == 2 && counts.values().all(|n| *n == 1);
    println!(
        "\n{}",
        if ok {
            "Nothing was lost and nothing happened twice: the ledger was posted once and the email sent once, despite the crash."
        } else {
            "UNEXPECTED: see the counts above."
        }
    );
    // Bring w1 back (a restart) so two workers serve from here on.
    spawn_worker(cfg, "w1", store, None, CancellationToken::new(), fleet);
    Ok(ok)
}

/// Waits (30 s at most) until w1 has registered its workflows and the scheduler is ready.
async fn wait_ready(store: &ScriptStore, http: &reqwest::Client, api: &str) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(30);
    while store.catalog_entry("invoice").await?.is_none() {
        if Instant::now() > deadline {
            bail!("worker w1 did not register its workflows");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    while !http
        .get(format!("{api}/readyz"))
        .send()
        .await
        .is_ok_and(|r| r.status().is_success())
    {
        if Instant::now() > deadline {
            bail!("the scheduler did not become ready (Redis and RabbitMQ connected)");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Ok(())
}

/// Starts an invoice run through the API; its thread id.
async fn start_invoice(http: &reqwest::Client, api: &str) -> anyhow::Result<ThreadId> {
    let invoice_id = format!("INV-{}", &savepoint_core::entropy::uuid().simple().to_string()[..6]);
    let resp: Value = http
        .post(format!("{api}/v1/runs"))
        .json(&json!({"workflow": "invoice", "input": {"invoice_id": invoice_id}}))
        .send()
        .await?
        .error_for_status()?
        .json()
        .await?;
    let thread = ThreadId::new(resp["thread_id"].as_str().unwrap_or_default().to_owned())?;
    println!("started run {thread} (invoice {invoice_id})");
    Ok(thread)
}

/// Prints the run's events and step commits as they happen, starts w2 once w1 has crashed,
/// and returns when the run has ended (or is blocked); 60 s at most.
async fn narrate(
    cfg: &Config,
    store: &ScriptStore,
    thread: &ThreadId,
    crash: &CancellationToken,
    started: Instant,
    fleet: &mut Fleet,
) -> anyhow::Result<()> {
    let (mut seen, mut seen_steps) = (0usize, 0usize);
    let mut w2_started = false;
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        // Events (claims, takeovers, effects) and step commits (journal entries), by time.
        let events = store.events(thread, 1000).await?;
        let journal = store.get(thread).await?.map(|(_, j)| j).unwrap_or_default();
        for (_, line) in new_lines(&events[seen.min(events.len())..], &journal, seen_steps) {
            println!("  [{:6.2}s] {line}", started.elapsed().as_secs_f64());
        }
        seen = events.len();
        seen_steps = journal.len();
        if crash.is_cancelled() && !w2_started {
            println!(
                "  [{:6.2}s] w1 CRASHED at failpoint effect.after_call (ledger posted, not yet recorded)",
                started.elapsed().as_secs_f64()
            );
            println!(
                "           its lease expires after {} ms; the scanner then rings w2",
                cfg.lease_ms
            );
            spawn_worker(cfg, "w2", store, None, CancellationToken::new(), fleet);
            w2_started = true;
        }
        let h = store.header(thread).await?.context("run vanished")?;
        if h.status.is_final() || h.status == RunStatus::Blocked {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("run {thread} did not finish in time (status {})", h.status);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The story's lines for events not shown yet and step entries from `first_step` on, by time.
fn new_lines(events: &[RunEvent], journal: &[Entry], first_step: usize) -> Vec<(u64, String)> {
    let mut lines: Vec<(u64, String)> = Vec::new();
    for e in events {
        let line = match e.typ.as_str() {
            "claimed" => format!("{} claimed the run", owner_name(&e.detail)),
            "takeover" => format!("{} took over the expired lease ({})", owner_name(&e.detail), e.detail),
            "effect_done" => format!("effect {} applied and recorded", e.detail),
            "effect_skipped" => format!(
                "effect {} already applied: recorded result journaled, not repeated",
                e.detail
            ),
            other => format!("{other} {}", e.detail),
        };
        lines.push((e.at, line));
    }
    for (i, e) in journal.iter().enumerate().skip(first_step) {
        if e.kind == savepoint_core::journal::EntryKind::Step {
            lines.push((e.at, format!("step {i} {} committed", e.name)));
        }
    }
    lines.sort_by_key(|l| l.0);
    lines
}

/// Prints how the run ended, its journal and its output.
fn print_run(thread: &ThreadId, h: &RunHeader, journal: &[Entry], started: Instant) {
    println!(
        "\nrun {thread}: {} after {:.2}s",
        h.status,
        started.elapsed().as_secs_f64()
    );
    for (i, e) in journal.iter().enumerate() {
        println!(
            "  journal[{i}] {:<6} {:<15} {}",
            e.kind.as_str(),
            e.name,
            serde_json::to_string(&e.outcome).unwrap_or_default()
        );
    }
    if let Some(out) = &h.output {
        println!("  output: {out}");
    }
}

/// How many times each (effect, key) of the run was applied, from the demo's effects log
/// (outside the engine), printed.
async fn effect_counts(store: &ScriptStore, thread: &ThreadId) -> anyhow::Result<BTreeMap<(String, String), usize>> {
    let mut counts: BTreeMap<(String, String), usize> = BTreeMap::new();
    for r in EffectLog::new(store)
        .all()
        .await
        .map_err(|e| anyhow::anyhow!("reading the effects log: {e}"))?
    {
        if r["thread_id"] == thread.as_str() {
            let k = (
                r["effect"].as_str().unwrap_or("").to_owned(),
                r["key"].as_str().unwrap_or("").to_owned(),
            );
            *counts.entry(k).or_default() += 1;
        }
    }
    println!("\neffects applied (from the demo effects log):");
    for ((effect, key), n) in &counts {
        println!(
            "  {effect:<12} key {key:<40} applied {n} time{}",
            if *n == 1 { "" } else { "s" }
        );
    }
    Ok(counts)
}

#[cfg(test)]
mod tests {
    use super::endpoint;

    #[test]
    fn endpoints_of_service_urls() {
        assert_eq!(
            endpoint("redis://127.0.0.1:6379", 6379).as_deref(),
            Some("127.0.0.1:6379")
        );
        assert_eq!(endpoint("redis://cache", 6379).as_deref(), Some("cache:6379"));
        assert_eq!(
            endpoint("amqp://guest:guest@127.0.0.1:5672/%2f", 5672).as_deref(),
            Some("127.0.0.1:5672")
        );
        assert_eq!(endpoint("amqp://u:p@mq/vhost", 5672).as_deref(), Some("mq:5672"));
        assert_eq!(endpoint("nonsense", 1), None);
    }
}
