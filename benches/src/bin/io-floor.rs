//! The I/O floor of Savepoint's design, measured on this machine: per step exactly one
//! compare-and-swap checkpoint script call in Redis and one persistent, confirmed message
//! through a quorum queue (publish + consume + ack). Nothing else: no journal encoding, no
//! leases, no events. Savepoint's steps/s are reported as a ratio of this.
//!
//! `cargo run --release -p savepoint-benches --bin io-floor -- --runs 500 --steps 10 --workers 2`

use clap::Parser;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

use savepoint_broker::{Broker, BrokerConfig, Delivery, Topology};

#[derive(Parser, Debug)]
struct Args {
    /// Runs (each a chain of steps).
    #[arg(long, default_value_t = 500)]
    runs: u64,
    /// Steps per run.
    #[arg(long, default_value_t = 10)]
    steps: u64,
    /// Consumers ("workers"), each with its own AMQP connection.
    #[arg(long, default_value_t = 2)]
    workers: usize,
    /// Prefetch per consumer (Savepoint's worker default is 128).
    #[arg(long, default_value_t = 128)]
    prefetch: u16,
    /// RabbitMQ URL.
    #[arg(
        long,
        env = "SAVEPOINT_AMQP_URL",
        default_value = "amqp://guest:guest@127.0.0.1:5672/%2f"
    )]
    amqp: String,
    /// Redis URL.
    #[arg(long, env = "SAVEPOINT_REDIS_URL", default_value = "redis://127.0.0.1:6379")]
    redis: String,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

const CAS: &str = r"
local v = redis.call('HGET', KEYS[1], 'ver')
if v ~= ARGV[1] then return 0 end
redis.call('HSET', KEYS[1], 'ver', tonumber(ARGV[1]) + 1, 'j:' .. ARGV[1], ARGV[2])
return 1
";

/// What every consumer task of the benchmark shares.
#[derive(Clone)]
struct Floor {
    /// The broker the steps go through.
    broker: Broker,
    /// The Redis connection the checkpoints go to.
    redis: redis::aio::ConnectionManager,
    /// The compare-and-swap checkpoint script.
    script: redis::Script,
    /// Steps checkpointed so far.
    done: Arc<AtomicU64>,
    /// Cancelled once every step is done.
    finished: CancellationToken,
    /// The benchmark's namespace.
    ns: String,
    /// Steps per run.
    steps: u64,
    /// Steps of all runs.
    total: u64,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let a = Args::parse();
    let ns = format!("floor{}", &uuid::Uuid::new_v4().simple().to_string()[..8]);
    let broker = Broker::connect(broker_config(&a, &ns), Duration::from_secs(30)).await?;
    let redis = redis::aio::ConnectionManager::new(redis::Client::open(a.redis.as_str())?).await?;
    let mut conn = redis.clone();
    seed_runs(&mut conn, &ns, a.runs).await?;
    let total = a.runs * a.steps;
    let floor = Floor {
        broker: broker.clone(),
        redis,
        script: redis::Script::new(CAS),
        done: Arc::new(AtomicU64::new(0)),
        finished: CancellationToken::new(),
        ns: ns.clone(),
        steps: a.steps,
        total,
    };
    let stop = CancellationToken::new();
    let consumers = spawn_consumers(&floor, a.workers, &stop);
    let started = Instant::now();
    start_runs(&broker, a.runs).await?;
    tokio::time::timeout(Duration::from_secs(600), floor.finished.cancelled()).await?;
    let wall = started.elapsed().as_secs_f64();
    stop.cancel();
    report(&a, total, wall);
    for c in consumers {
        let _ = tokio::time::timeout(Duration::from_secs(15), c).await;
    }
    broker.delete_topology().await?;
    delete_runs(&mut conn, &ns, a.runs).await
}

/// The broker settings: the namespace's own topology, the given prefetch.
fn broker_config(a: &Args, ns: &str) -> BrokerConfig {
    BrokerConfig {
        amqp_url: a.amqp.clone(),
        topology: Topology::new(ns, "default"),
        prefetch: a.prefetch,
        delivery_limit: 20,
        reconnect_min: Duration::from_millis(100),
        reconnect_max: Duration::from_secs(5),
        tls: Default::default(),
    }
}

/// The Redis key of run `run` (64 hash slots' worth of tags).
fn run_key(ns: &str, run: u64) -> String {
    format!("{ns}:{{f{:02}}}:run:{run}", run % 64)
}

/// Writes every run's hash at version 0.
async fn seed_runs(conn: &mut redis::aio::ConnectionManager, ns: &str, runs: u64) -> anyhow::Result<()> {
    for run in 0..runs {
        let _: () = redis::cmd("HSET")
            .arg(run_key(ns, run))
            .arg("ver")
            .arg(0)
            .query_async(conn)
            .await?;
    }
    Ok(())
}

/// Starts `workers` consumers, each with its own AMQP connection, handling every delivery
/// in a task of its own.
fn spawn_consumers(floor: &Floor, workers: usize, stop: &CancellationToken) -> Vec<tokio::task::JoinHandle<()>> {
    let mut consumers = Vec::new();
    for w in 0..workers {
        let mut consumer = floor.broker.consumer(&format!("floor-{w}"), stop.clone());
        let floor = floor.clone();
        consumers.push(tokio::spawn(async move {
            while let Some(d) = consumer.next().await {
                tokio::spawn(step(floor.clone(), d));
            }
        }));
    }
    consumers
}

/// The run and step a task names (`<run>:<step>`; 0 for what does not parse).
fn parse_task(text: &str) -> (u64, u64) {
    let (run, step) = text.split_once(':').unwrap_or(("0", "0"));
    (run.parse().unwrap_or(0), step.parse().unwrap_or(0))
}

/// One step: checkpoints it (compare-and-swap), publishes the run's next step, counts it,
/// and acks the delivery.
async fn step(mut floor: Floor, d: Delivery) {
    let text = String::from_utf8_lossy(&d.data).into_owned();
    let (run, step) = parse_task(&text);
    let k = run_key(&floor.ns, run);
    let ok: i64 = floor
        .script
        .key(k)
        .arg(step)
        .arg(r#"{"name":"s","kind":"step","outcome":{"ok":{"i":1,"acc":0}}}"#)
        .invoke_async(&mut floor.redis)
        .await
        .unwrap_or(0);
    if ok == 1 {
        if step + 1 < floor.steps {
            let _ = floor
                .broker
                .publish(format!("{run}:{}", step + 1).as_bytes(), &[])
                .await;
        }
        if floor.done.fetch_add(1, Ordering::SeqCst) + 1 == floor.total {
            floor.finished.cancel();
        }
    }
    let _ = d.ack().await;
}

/// Publishes every run's first step, all at once.
async fn start_runs(broker: &Broker, runs: u64) -> anyhow::Result<()> {
    let mut pubs = tokio::task::JoinSet::new();
    for run in 0..runs {
        let b = broker.clone();
        pubs.spawn(async move { b.publish(format!("{run}:0").as_bytes(), &[]).await });
    }
    while let Some(r) = pubs.join_next().await {
        r??;
    }
    Ok(())
}

/// Prints the throughput, as JSON or as a line of text.
fn report(a: &Args, total: u64, wall: f64) {
    let steps_per_s = total as f64 / wall;
    if a.json {
        println!(
            "{}",
            serde_json::json!({"runs": a.runs, "steps": total, "workers": a.workers, "wall_s": wall, "steps_per_s": steps_per_s})
        );
    } else {
        println!(
            "io-floor: {} runs x {} steps, {} workers: {total} steps in {wall:.2} s = {steps_per_s:.0} steps/s",
            a.runs, a.steps, a.workers
        );
    }
}

/// Deletes every run's hash.
async fn delete_runs(conn: &mut redis::aio::ConnectionManager, ns: &str, runs: u64) -> anyhow::Result<()> {
    let mut pipe = redis::pipe();
    for run in 0..runs {
        pipe.cmd("DEL").arg(run_key(ns, run));
    }
    let _: () = pipe.query_async(conn).await?;
    Ok(())
}
