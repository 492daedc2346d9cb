//! Runs waiting on a durable timer: Redis bytes per waiting run and the due scanner's cost
//! per tick, for N runs (default 1,000 and 20,000). Uses the store's real scripts: each run
//! is created, claimed, journals one step and suspends as `sleeping` for an hour.
//!
//! `cargo run --release -p savepoint-benches --bin timers -- --runs 1000 --runs 20000`

use clap::Parser;
use std::time::{Duration, Instant};

use savepoint_benches::{sleeping_run, used_memory};
use savepoint_core::ids::{Namespace, ThreadId};
use savepoint_core::keys::Keys;
use savepoint_store::{ScriptStore, StoreConfig};

#[derive(Parser, Debug)]
struct Args {
    /// Waiting-run counts to measure (repeatable).
    #[arg(long = "runs", default_values_t = vec![1000, 20000])]
    runs: Vec<usize>,
    /// Redis URL.
    #[arg(long, env = "SAVEPOINT_REDIS_URL", default_value = "redis://127.0.0.1:6379")]
    redis: String,
    /// Partitions.
    #[arg(long, default_value_t = 64)]
    partitions: u16,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let a = Args::parse();
    for &n in &a.runs {
        let ns = format!("timers{}", &uuid::Uuid::new_v4().simple().to_string()[..8]);
        let keys = Keys::new(Namespace::new(ns.clone())?, a.partitions);
        let store = ScriptStore::connect(&a.redis, keys.clone(), StoreConfig::default()).await?;
        let before = used_memory(&store).await?;
        let started = Instant::now();
        let mut set = tokio::task::JoinSet::<anyhow::Result<()>>::new();
        for i in 0..n {
            let store = store.clone();
            set.spawn(async move {
                let t = ThreadId::new(format!("timer-{i}"))?;
                sleeping_run(&store, &t, Duration::from_secs(3600)).await?;
                Ok(())
            });
            if set.len() >= 256 {
                if let Some(r) = set.join_next().await {
                    r??;
                }
            }
        }
        while let Some(r) = set.join_next().await {
            r??;
        }
        let setup = started.elapsed();
        let after = used_memory(&store).await?;
        let mut sample = 0u64;
        for i in (0..n).step_by((n / 100).max(1)).take(100) {
            sample += store.run_memory_bytes(&ThreadId::new(format!("timer-{i}"))?).await?;
        }
        let sampled = (0..n).step_by((n / 100).max(1)).take(100).count() as f64;
        // One scanner tick = one scan_due call per partition; nothing is due for an hour.
        let ticks = 20;
        let t0 = Instant::now();
        for _ in 0..ticks {
            for p in 0..a.partitions {
                let (_, due) = store.scan_due(p, 500, Duration::from_secs(5)).await?;
                anyhow::ensure!(due.is_empty(), "nothing should be due");
            }
        }
        let tick = t0.elapsed() / ticks;
        println!(
            "timers: {n} runs sleeping: setup {:.2}s; redis used_memory +{:.0} B/run (incl. due/index zsets); \
             MEMORY USAGE run+events {:.0} B/run; scanner tick over {} partitions: {:.2} ms",
            setup.as_secs_f64(),
            (after - before) as f64 / n as f64,
            sample as f64 / sampled,
            a.partitions,
            tick.as_secs_f64() * 1000.0
        );
        store.purge_namespace().await?;
    }
    Ok(())
}
