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

use savepoint_broker::{Broker, BrokerConfig, Topology};

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

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let a = Args::parse();
    let ns = format!("floor{}", &uuid::Uuid::new_v4().simple().to_string()[..8]);
    let cfg = BrokerConfig {
        amqp_url: a.amqp.clone(),
        topology: Topology::new(&ns, "default"),
        prefetch: a.prefetch,
        delivery_limit: 20,
        reconnect_min: Duration::from_millis(100),
        reconnect_max: Duration::from_secs(5),
        tls: Default::default(),
    };
    let broker = Broker::connect(cfg, Duration::from_secs(30)).await?;
    let redis = redis::aio::ConnectionManager::new(redis::Client::open(a.redis.as_str())?).await?;
    let script = redis::Script::new(CAS);
    let key = |run: u64| format!("{ns}:{{f{:02}}}:run:{run}", run % 64);
    let mut conn = redis.clone();
    for run in 0..a.runs {
        let _: () = redis::cmd("HSET")
            .arg(key(run))
            .arg("ver")
            .arg(0)
            .query_async(&mut conn)
            .await?;
    }
    let total = a.runs * a.steps;
    let done = Arc::new(AtomicU64::new(0));
    let finished = CancellationToken::new();
    let stop = CancellationToken::new();
    let mut consumers = Vec::new();
    for w in 0..a.workers {
        let mut consumer = broker.consumer(&format!("floor-{w}"), stop.clone());
        let (broker, redis, script, done, finished, ns) = (
            broker.clone(),
            redis.clone(),
            script.clone(),
            done.clone(),
            finished.clone(),
            ns.clone(),
        );
        let steps = a.steps;
        consumers.push(tokio::spawn(async move {
            while let Some(d) = consumer.next().await {
                let (broker, mut redis, script, done, finished, ns) = (
                    broker.clone(),
                    redis.clone(),
                    script.clone(),
                    done.clone(),
                    finished.clone(),
                    ns.clone(),
                );
                tokio::spawn(async move {
                    let text = String::from_utf8_lossy(&d.data).into_owned();
                    let (run, step) = text.split_once(':').unwrap_or(("0", "0"));
                    let (run, step): (u64, u64) = (run.parse().unwrap_or(0), step.parse().unwrap_or(0));
                    let k = format!("{ns}:{{f{:02}}}:run:{run}", run % 64);
                    let ok: i64 = script
                        .key(k)
                        .arg(step)
                        .arg(r#"{"name":"s","kind":"step","outcome":{"ok":{"i":1,"acc":0}}}"#)
                        .invoke_async(&mut redis)
                        .await
                        .unwrap_or(0);
                    if ok == 1 {
                        if step + 1 < steps {
                            let _ = broker.publish(format!("{run}:{}", step + 1).as_bytes(), &[]).await;
                        }
                        if done.fetch_add(1, Ordering::SeqCst) + 1 == total {
                            finished.cancel();
                        }
                    }
                    let _ = d.ack().await;
                });
            }
        }));
    }
    let started = Instant::now();
    let mut pubs = tokio::task::JoinSet::new();
    for run in 0..a.runs {
        let b = broker.clone();
        pubs.spawn(async move { b.publish(format!("{run}:0").as_bytes(), &[]).await });
    }
    while let Some(r) = pubs.join_next().await {
        r??;
    }
    tokio::time::timeout(Duration::from_secs(600), finished.cancelled()).await?;
    let wall = started.elapsed().as_secs_f64();
    stop.cancel();
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
    for c in consumers {
        let _ = tokio::time::timeout(Duration::from_secs(15), c).await;
    }
    broker.delete_topology().await?;
    let mut pipe = redis::pipe();
    for run in 0..a.runs {
        pipe.cmd("DEL").arg(key(run));
    }
    let _: () = pipe.query_async(&mut conn).await?;
    Ok(())
}
