//! The cost of scale on the due scanner, on one Redis:
//!
//! 1. **Partitions**: one tick of the real scanner (the scheduler's own code, 32 partitions
//!    at once) over 64, 256 and 1,024 empty partitions.
//! 2. **Sleeping runs**: runs asleep for an hour are added in steps up to `--runs` (default
//!    1,000,000): Redis bytes per sleeping run, and the tick at each step, which must not grow
//!    with the runs that are not due.
//! 3. **A batch due at once**: `--wake` runs (default 100,000) all sleeping until one instant;
//!    the real scanner loop (200 ms ticks, batches of 500, MAX_ROUNDS per partition) hands
//!    them out and publishes a task for each to an embedded queue, whose consumer stamps each
//!    arrival: wake-up lateness p50/p99/max past the instant.
//!
//! `cargo run --release -p savepoint-benches --bin scale -- [--runs 1000000] [--wake 100000]`
//! (CI runs a short slice: `--runs 2000 --wake 2000 --partitions 64`).

use clap::Parser;
use std::sync::Arc;
use std::time::{Duration, Instant};

use savepoint_benches::{sleeping_run, used_memory};
use savepoint_broker::Broker;
use savepoint_core::failpoints::Failpoints;
use savepoint_core::ids::{Namespace, ThreadId};
use savepoint_core::keys::Keys;
use savepoint_scheduler::{run_scanner, scan_tick_alone, Publisher, ScanSettings};
use savepoint_store::{ScriptStore, StoreConfig};

#[derive(Parser, Debug)]
struct Args {
    /// Partition counts whose empty tick is measured (repeatable).
    #[arg(long = "partitions", default_values_t = vec![64, 256, 1024])]
    partitions: Vec<u16>,
    /// Sleeping runs to grow to (measured at 0, 1 %, 10 % and 100 % of it).
    #[arg(long, default_value_t = 1_000_000)]
    runs: usize,
    /// Runs due at the same instant.
    #[arg(long, default_value_t = 100_000)]
    wake: usize,
    /// Redis URL.
    #[arg(long, env = "SAVEPOINT_REDIS_URL", default_value = "redis://127.0.0.1:6379")]
    redis: String,
    /// Scripts in flight while creating runs.
    #[arg(long, default_value_t = 256)]
    concurrency: usize,
}

fn settings() -> ScanSettings {
    ScanSettings {
        interval: Duration::from_millis(200),
        batch: 500,
        period: Duration::from_secs(5),
        split: false,
    }
}

async fn open(redis: &str, tag: &str, partitions: u16) -> anyhow::Result<(ScriptStore, Publisher, Broker)> {
    let ns = format!("{tag}{}", &uuid::Uuid::new_v4().simple().to_string()[..8]);
    let keys = Keys::new(Namespace::new(ns.clone())?, partitions);
    let store = ScriptStore::connect(redis, keys.clone(), StoreConfig::default()).await?;
    let broker = Broker::embedded(savepoint_broker::mem::queue(&ns, 5), 1000);
    let publisher = Publisher::new(broker.clone(), keys, Failpoints::default());
    Ok((store, publisher, broker))
}

/// Mean of `n` real scanner ticks (ms).
async fn tick_ms(store: &ScriptStore, publisher: &Publisher, n: u32) -> anyhow::Result<f64> {
    let s = settings();
    let t0 = Instant::now();
    for _ in 0..n {
        let handed = scan_tick_alone(store, publisher, &s).await?;
        anyhow::ensure!(handed == 0, "nothing should be due, {handed} were handed out");
    }
    Ok(t0.elapsed().as_secs_f64() * 1000.0 / f64::from(n))
}

/// Creates runs `from..to` sleeping until `wake_at` (or for an hour).
async fn grow(
    store: &ScriptStore,
    prefix: &str,
    range: std::ops::Range<usize>,
    wake_at: Option<Instant>,
    concurrency: usize,
) -> anyhow::Result<()> {
    let mut set = tokio::task::JoinSet::<anyhow::Result<()>>::new();
    for i in range {
        let store = store.clone();
        let t = ThreadId::new(format!("{prefix}-{i}"))?;
        let nap = wake_at.map_or(Duration::from_secs(3600), |w| {
            w.saturating_duration_since(Instant::now())
        });
        set.spawn(async move { sleeping_run(&store, &t, nap).await });
        if set.len() >= concurrency {
            if let Some(r) = set.join_next().await {
                r??;
            }
        }
    }
    while let Some(r) = set.join_next().await {
        r??;
    }
    Ok(())
}

fn pct(sorted: &[f64], q: f64) -> f64 {
    sorted[((sorted.len() as f64 - 1.0) * q).round() as usize]
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let a = Args::parse();
    empty_ticks(&a).await?;
    let p = a.partitions.first().copied().unwrap_or(64);
    sleeping_runs(&a, p).await?;
    if a.wake > 0 {
        wake_batch(&a, p).await?;
    }
    Ok(())
}

/// 1. Tick over empty partitions.
async fn empty_ticks(a: &Args) -> anyhow::Result<()> {
    for &p in &a.partitions {
        let (store, publisher, _b) = open(&a.redis, "scalep", p).await?;
        let ms = tick_ms(&store, &publisher, 20).await?;
        println!(
            "scale: empty tick over {p} partitions: {ms:.2} ms ({:.1} µs a partition)",
            ms * 1000.0 / f64::from(p)
        );
        store.purge_namespace().await?;
    }
    Ok(())
}

/// 2. Sleeping runs, not due: bytes per run and the tick, as they grow.
async fn sleeping_runs(a: &Args, p: u16) -> anyhow::Result<()> {
    let (store, publisher, _b) = open(&a.redis, "scales", p).await?;
    let base = used_memory(&store).await?;
    let mut have = 0;
    println!(
        "scale: 0 sleeping runs: tick over {p} partitions {:.2} ms",
        tick_ms(&store, &publisher, 20).await?
    );
    for target in [a.runs / 100, a.runs / 10, a.runs] {
        if target <= have {
            continue;
        }
        let t0 = Instant::now();
        grow(&store, "zz", have..target, None, a.concurrency).await?;
        let rate = (target - have) as f64 / t0.elapsed().as_secs_f64().max(1e-9);
        have = target;
        let mem = used_memory(&store).await? - base;
        println!(
            "scale: {have} sleeping runs (+{:.0} runs/s to create, 4 scripts each): redis used_memory +{:.0} B/run \
             ({:.2} GB); tick over {p} partitions {:.2} ms",
            rate,
            mem as f64 / have as f64,
            mem as f64 / 1e9,
            tick_ms(&store, &publisher, 20).await?
        );
    }
    store.purge_namespace().await?;
    Ok(())
}

/// 3. A batch all due at one instant, handed out by the real scanner loop.
async fn wake_batch(a: &Args, p: u16) -> anyhow::Result<()> {
    let (store, publisher, broker) = open(&a.redis, "scalew", p).await?;
    let wake_at = due_batch(&store, a).await?;
    let stop = tokio_util::sync::CancellationToken::new();
    let scanner = tokio::spawn(run_scanner(store.clone(), publisher.clone(), settings(), stop.clone()));
    let mut l = lateness(&broker, &stop, a.wake, wake_at).await?;
    stop.cancel();
    let _ = scanner.await;
    l.sort_by(f64::total_cmp);
    println!(
        "scale: {} runs due at one instant over {p} partitions, handed out by the scanner (200 ms ticks, \
         batches of 500) and published: lateness p50 {:.0} ms, p99 {:.0} ms, max {:.0} ms ({:.0} runs/s)",
        a.wake,
        pct(&l, 0.5),
        pct(&l, 0.99),
        pct(&l, 1.0),
        a.wake as f64 / (pct(&l, 1.0) / 1000.0).max(1e-3)
    );
    store.purge_namespace().await?;
    Ok(())
}

/// Creates `--wake` runs all sleeping until one instant, just after the last of them sleeps;
/// returns the instant.
async fn due_batch(store: &ScriptStore, a: &Args) -> anyhow::Result<Instant> {
    // Creation rate from a first slice, so the instant falls just after the last run sleeps.
    let t0 = Instant::now();
    let probe = a.wake.min(1000);
    grow(
        store,
        "w",
        0..probe,
        Some(Instant::now() + Duration::from_secs(3600)),
        a.concurrency,
    )
    .await?;
    let rate = probe as f64 / t0.elapsed().as_secs_f64();
    let wake_at = Instant::now() + Duration::from_secs_f64((a.wake - probe) as f64 / rate * 1.5 + 2.0);
    // The probe runs sleep an hour: re-create the batch under other ids, all due at wake_at.
    grow(store, "wk", 0..a.wake, Some(wake_at), a.concurrency).await?;
    anyhow::ensure!(
        Instant::now() < wake_at,
        "creating the batch took past the instant: lower --wake"
    );
    Ok(wake_at)
}

/// Consumes `wake` tasks, acking each: how late (ms) each arrived past `wake_at`.
async fn lateness(
    broker: &Broker,
    stop: &tokio_util::sync::CancellationToken,
    wake: usize,
    wake_at: Instant,
) -> anyhow::Result<Vec<f64>> {
    let mut consumer = broker.consumer("scale", stop.clone());
    let late = Arc::new(std::sync::Mutex::new(Vec::with_capacity(wake)));
    let deadline = wake_at + Duration::from_secs(600);
    while late.lock().unwrap_or_else(|p| p.into_inner()).len() < wake {
        let Ok(Some(d)) = tokio::time::timeout_at(deadline.into(), consumer.next()).await else {
            anyhow::bail!("the scanner stopped handing out runs");
        };
        let at = Instant::now();
        let _ = d.ack().await;
        late.lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(at.saturating_duration_since(wake_at).as_secs_f64() * 1000.0);
    }
    let l = late.lock().unwrap_or_else(|p| p.into_inner()).clone();
    Ok(l)
}
