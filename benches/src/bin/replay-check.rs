//! The deploy gate's throughput (issue 28 §2): `--runs` runs (default 100,000) waiting for a
//! human after one step are written through the store's real scripts (create, claim, commit,
//! suspend), then `replay_check` replays every live run of the namespace against the same
//! workflow, read-only, and prints runs checked per second.
//!
//! `cargo run --release -p savepoint-benches --bin replay-check -- [--runs 100000]`

use clap::Parser;
use serde_json::{json, Value};
use std::time::Instant;

use savepoint::workflow::{Ctx, Registry, Workflow, WorkflowError};
use savepoint_core::ids::{Namespace, ThreadId};
use savepoint_core::journal::{Entry, EntryKind, Outcome};
use savepoint_core::keys::Keys;
use savepoint_store::{ClaimOutcome, ScriptStore, ServedSpec, StoreConfig, Suspend, Wait};
use savepoint_worker::replay_check::{replay_check, CheckOptions};

#[derive(Parser, Debug)]
struct Args {
    /// Waiting runs to check.
    #[arg(long, default_value_t = 100_000)]
    runs: usize,
    /// Redis URL.
    #[arg(long, env = "SAVEPOINT_REDIS_URL", default_value = "redis://127.0.0.1:6379")]
    redis: String,
    /// Scripts in flight while creating runs.
    #[arg(long, default_value_t = 256)]
    concurrency: usize,
}

/// A step, then a human's answer.
struct Gate;

impl Workflow for Gate {
    const NAME: &'static str = "gate";
    type Input = Value;
    type Output = Value;
    async fn run(&self, ctx: &Ctx, _input: Value) -> Result<Value, WorkflowError> {
        let text: String = ctx.step("read", || async { Ok("text".to_owned()) }).await?;
        ctx.interrupt("approve", json!({"text": text})).await
    }
}

/// Run `t` as a worker of `Gate` leaves it: its step journaled, waiting at the interrupt.
async fn waiting_run(store: &ScriptStore, t: &ThreadId) -> anyhow::Result<()> {
    store.create(t, Gate::NAME, 1, "{}", "").await?;
    let ClaimOutcome::Claimed(c) = store.claim(t, "bench", Some(0), &ServedSpec::any()).await? else {
        anyhow::bail!("claim of {t} failed");
    };
    let mut lease = c.lease;
    let step = Entry::new("read", EntryKind::Step, Outcome::Ok(json!("text")), 1);
    store
        .commit(&mut lease, 0, std::slice::from_ref(&step), ("", ""), None)
        .await?;
    let wait = Wait {
        kind: "interrupt".into(),
        name: "approve".into(),
        payload: json!({"text": "text"}),
    };
    store
        .suspend(&mut lease, None, Suspend::waiting(&wait), ("interrupted", "approve"))
        .await?;
    Ok(())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let a = Args::parse();
    let ns = Namespace::new(format!("bench-replay-{}", std::process::id()))?;
    let store = ScriptStore::connect(&a.redis, Keys::new(ns, 16), StoreConfig::default()).await?;
    let started = Instant::now();
    let mut set = tokio::task::JoinSet::<anyhow::Result<()>>::new();
    for i in 0..a.runs {
        let (store, t) = (store.clone(), ThreadId::new(format!("gate-{i}"))?);
        set.spawn(async move { waiting_run(&store, &t).await });
        if set.len() >= a.concurrency {
            if let Some(r) = set.join_next().await {
                r??;
            }
        }
    }
    while let Some(r) = set.join_next().await {
        r??;
    }
    println!(
        "replay-check: {} waiting runs written in {:.1} s",
        a.runs,
        started.elapsed().as_secs_f64()
    );
    let mut reg = Registry::new();
    reg.register(Gate);
    let report = replay_check(&store, &reg, &CheckOptions::default()).await?;
    print!("{}", report.render());
    println!(
        "replay-check: {} runs checked at {:.0} runs/s ({} clean)",
        report.checked,
        report.rate(),
        report.clean
    );
    let keys: Vec<String> = store
        .query(redis::cmd("KEYS").arg(format!("{}:*", store.keys().namespace())))
        .await?;
    for chunk in keys.chunks(1000) {
        let _: u64 = store.query(redis::cmd("UNLINK").arg(chunk)).await?;
    }
    Ok(())
}
