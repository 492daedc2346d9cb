//! The fleet under chaos, kept short for CI: 3 worker processes and 2 schedulers, a few
//! hundred `webhook` runs, a random worker SIGKILLed every second (and replaced), the
//! broker restarted once. Every run must end completed (or blocked with a reason), no
//! webhook key may be delivered twice under the `block` policy, no run may be lost.

use rand::Rng;
use std::io::Write;
use std::time::{Duration, Instant};

use savepoint_cli::loadgen::receiver;
use savepoint_integration_tests::procs::Proc;
use savepoint_integration_tests::scenario::World;

const WORKER: &str = env!("CARGO_BIN_EXE_it-worker");
const SCHEDULER: &str = env!("CARGO_BIN_EXE_it-scheduler");
const RUNS: usize = 300;

/// Runs `rabbitmqctl <args>`; returns its stdout, panics (with its stderr) if it fails.
async fn rabbitmqctl(args: &[&str]) -> String {
    let out = tokio::process::Command::new("rabbitmqctl")
        .args(args)
        .output()
        .await
        .expect("rabbitmqctl runs");
    assert!(
        out.status.success(),
        "rabbitmqctl {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The broker under test, proven to be the one the local `rabbitmqctl` controls: a
/// connection to the test's AMQP URL holding an exclusive, uniquely named probe queue that
/// `rabbitmqctl list_queues` must list.
struct BrokerUnderTest {
    conn: lapin::Connection,
    _channel: lapin::Channel,
    amqp_url: String,
    node: String,
}

/// Connects to `cfg.amqp_url`, declares a probe queue there and checks that `rabbitmqctl`
/// sees it; panics if it does not (rabbitmqctl would restart some other broker).
async fn broker_under_test(cfg: &savepoint_runtime::config::Config) -> BrokerUnderTest {
    let uri: lapin::uri::AMQPUri = cfg.amqp_url.parse().expect("the test's AMQP URL parses");
    let conn = lapin::Connection::connect(&cfg.amqp_url, lapin::ConnectionProperties::default())
        .await
        .expect("connect to the broker under test");
    let channel = conn.create_channel().await.expect("channel");
    let probe = format!(
        "{}.restart-probe-{}",
        cfg.namespace,
        &uuid::Uuid::new_v4().simple().to_string()[..8]
    );
    let opts = lapin::options::QueueDeclareOptions {
        exclusive: true,
        auto_delete: true,
        ..Default::default()
    };
    channel
        .queue_declare(probe.as_str().into(), opts, lapin::types::FieldTable::default())
        .await
        .expect("declare the probe queue on the broker under test");
    let node = rabbitmqctl(&["-q", "eval", "rabbit_nodes:cluster_name()."])
        .await
        .trim()
        .to_owned();
    let listed = rabbitmqctl(&["-q", "list_queues", "-p", &uri.vhost, "name", "--no-table-headers"]).await;
    assert!(
        listed.lines().any(|l| l.trim() == probe),
        "refusing to restart RabbitMQ: the local rabbitmqctl controls cluster {node}, which does not have the \
         queue {probe:?} just declared on vhost {:?} through the test's AMQP URL {}; it is not the broker under \
         test. Point the test at the broker rabbitmqctl controls (e.g. SAVEPOINT_TEST_FORCE_LOCAL=1 with a local \
         RabbitMQ) or set RABBITMQ_NODENAME / rabbitmqctl -n to the broker under test",
        uri.vhost,
        cfg.amqp_url
    );
    BrokerUnderTest {
        conn,
        _channel: channel,
        amqp_url: cfg.amqp_url.clone(),
        node,
    }
}

/// Restarts the broker under test (`rabbitmqctl stop_app`, `start_app`) and proves it
/// happened: the node reports the app stopped, the broker dropped the probe connection, then
/// the app runs again and the test's AMQP URL accepts connections.
async fn restart_broker(b: BrokerUnderTest) {
    let running = || async {
        rabbitmqctl(&["-q", "eval", "rabbit:is_running()."])
            .await
            .trim()
            .to_owned()
    };
    assert_eq!(
        running().await,
        "true",
        "{}: the broker app runs before the restart",
        b.node
    );
    assert!(
        b.conn.status().connected(),
        "the probe connection is up before the restart"
    );
    rabbitmqctl(&["stop_app"]).await;
    assert_eq!(running().await, "false", "{}: stop_app stopped the broker app", b.node);
    let deadline = Instant::now() + Duration::from_secs(10);
    while b.conn.status().connected() {
        assert!(
            Instant::now() < deadline,
            "the broker under test ({}) still holds the probe connection 10 s after stop_app: rabbitmqctl stopped \
             another broker",
            b.amqp_url
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    rabbitmqctl(&["start_app"]).await;
    assert_eq!(running().await, "true", "{}: start_app started the broker app", b.node);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match lapin::Connection::connect(&b.amqp_url, lapin::ConnectionProperties::default()).await {
            Ok(c) => {
                let _ = c.close(200, "ok".into()).await;
                break;
            }
            Err(e) => assert!(
                Instant::now() < deadline,
                "the broker under test does not accept connections 30 s after start_app: {e}"
            ),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let _ = writeln!(
        std::io::stderr(),
        "fleet: broker {} restarted (app stopped, probe connection dropped, app running again)",
        b.node
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fleet_survives_sigkills_and_a_broker_restart() {
    let w = World::new("fl", |c| c.worker.slice_max_steps = 2).await;
    // Fail before any load if rabbitmqctl does not control the broker under test.
    let mut broker = Some(broker_under_test(&w.cfg).await);
    let stop = tokio_util::sync::CancellationToken::new();
    let (hook, deliveries) = receiver::start(stop.clone()).await.unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let addr = format!("127.0.0.1:{port}");
    let _sched2 = Proc::spawn(SCHEDULER, "sched-2", &w.cfg, &[("SAVEPOINT_HTTP_ADDR", &addr)]);
    let mut workers: Vec<Proc> = (0..3).map(|i| w.worker(WORKER, &format!("w{i}"), "")).collect();
    w.wait_registered("webhook").await;

    // Submit at ~20 runs/s for about 15 s, so the chaos below overlaps the whole load.
    let started = Instant::now();
    let submitter = w.submit_webhook_runs(&hook, "fleet", RUNS, Duration::from_millis(50));
    let submitted = submitter.accepted.clone();
    let (mut kills, mut restarted, mut next_kill) = (0, false, Instant::now() + Duration::from_secs(1));
    let deadline = Instant::now() + Duration::from_secs(150);
    let ended = loop {
        let threads = submitted.lock().unwrap().clone();
        let mut pipe = redis::pipe();
        for t in &threads {
            pipe.cmd("HGET").arg(&w.store.keys().run(t).run).arg("status");
        }
        let statuses: Vec<Option<String>> = w.store.pipeline(&pipe).await.unwrap_or_default();
        let ended = statuses
            .iter()
            .filter(|s| matches!(s.as_deref(), Some("completed" | "blocked")))
            .count();
        if ended == RUNS {
            break ended;
        }
        assert!(Instant::now() < deadline, "only {ended}/{RUNS} runs ended in time");
        // Chaos for the first 20 seconds: a SIGKILL a second, one broker restart.
        if started.elapsed() < Duration::from_secs(20) && Instant::now() >= next_kill {
            let victim = rand::rng().random_range(0..workers.len());
            workers[victim].signal("KILL");
            let _ = workers[victim].wait_exit(Duration::from_secs(5)).await;
            workers[victim] = w.worker(WORKER, &format!("r{kills}"), "");
            kills += 1;
            next_kill = Instant::now() + Duration::from_secs(1);
        }
        if !restarted && started.elapsed() > Duration::from_secs(3) {
            restart_broker(broker.take().expect("restarted once")).await;
            restarted = true;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let elapsed = started.elapsed();
    submitter.task.await.unwrap();
    let threads = submitted.lock().unwrap().clone();
    let (mut completed, mut blocked) = (0, 0);
    for t in &threads {
        let run = w.run(t).await;
        match run["status"].as_str() {
            Some("completed") => completed += 1,
            Some("blocked") => {
                blocked += 1;
                assert!(
                    run["blocked_reason"]
                        .as_str()
                        .is_some_and(|r| r.contains("outcome unknown")),
                    "{run}"
                );
            }
            other => panic!("run {t} ended as {other:?}"),
        }
    }
    let counts = deliveries.snapshot();
    let twice: Vec<_> = counts.iter().filter(|(_, n)| **n > 1).collect();
    assert!(
        twice.is_empty(),
        "keys delivered twice under the block policy: {twice:?}"
    );
    assert!(counts.len() >= completed, "every completed run delivered its webhook");
    assert!(restarted, "the broker was restarted");
    let figures = format!(
        "fleet: {RUNS} runs ({ended} ended) in {:.1}s: {completed} completed, {blocked} blocked (effect in doubt), \
         {kills} workers SIGKILLed, 1 broker restart, {} webhook keys delivered, 0 twice",
        elapsed.as_secs_f64(),
        counts.len()
    );
    // Written past the test harness's capture so CI logs show the figures.
    let _ = writeln!(std::io::stderr(), "{figures}");
    stop.cancel();
}
