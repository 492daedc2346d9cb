//! Savepoint on a real 3-node RabbitMQ cluster (started by `deploy/cluster/rabbitmq-cluster.sh`
//! beside the machine's own node), its task and dead-letter queues quorum queues with a
//! member on every node. The fleet (an in-process scheduler and three worker processes) is
//! given all three nodes' URLs. Under a steady load of webhook runs, one node is SIGKILLed and
//! brought back, then another node's RabbitMQ application is stopped and started again.
//! Checked at the provider (an HTTP receiver): no key applied twice, every accepted run ends
//! completed or blocked with a reason. Reported: the longest stall around each failure.

use std::io::Write;
use std::time::{Duration, Instant};

use savepoint_integration_tests::rabbitmq_cluster::RabbitCluster;
use savepoint_integration_tests::scenario::{quiet_counts, ProgressProbe, World};

const WORKER: &str = env!("CARGO_BIN_EXE_it-worker");

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_lost_one_after_another_under_load_lose_and_repeat_nothing() {
    let cluster = RabbitCluster::start(5701);
    let url = cluster.url.clone();
    let w = World::new("rmq", move |c| {
        c.amqp_url = url;
        c.worker.slice_max_steps = 2;
    })
    .await;
    let queue = w.cfg.broker().topology.queue_name();
    let members = cluster.quorum_members(&queue);
    assert_eq!(
        members.len(),
        3,
        "{queue} is replicated on all three nodes: {members:?}"
    );
    let fleet = w.webhook_fleet(WORKER, 3).await;
    let (hook, provider) = (&fleet.hook, &fleet.provider);

    const RUNS: usize = 300;
    let started = Instant::now();
    let probe = ProgressProbe::start(provider);
    let submitter = w.submit_webhook_runs_retrying(hook, "rq", RUNS, Duration::from_millis(100));
    tokio::time::sleep(Duration::from_secs(3)).await;

    // 1. Node 1 is SIGKILLed (the one the fleet's first URL names), then started again.
    let t_kill = Instant::now();
    let before_kill = provider.snapshot().len();
    cluster.kill(1);
    tokio::time::sleep(Duration::from_secs(4)).await;
    cluster.restart(1);
    let back1 = t_kill.elapsed();
    // 2. Node 2's RabbitMQ application is stopped (the Erlang node stays up), then started.
    let t_stop = Instant::now();
    let before_stop = provider.snapshot().len();
    cluster.ctl(2, &["-q", "stop_app"]);
    tokio::time::sleep(Duration::from_secs(4)).await;
    cluster.ctl(2, &["-q", "start_app"]);
    let back2 = t_stop.elapsed();
    let t_back = Instant::now();

    let refused = submitter.await.unwrap();
    let (completed, blocked) = w.settle("rq", RUNS).await;
    let (applied, twice) = quiet_counts(provider).await;
    assert!(
        twice.is_empty(),
        "keys applied twice across the node failures: {twice:?}"
    );
    assert!(applied >= completed, "every completed run applied its webhook");
    assert!(
        before_kill > 0 && before_stop < RUNS,
        "the nodes failed mid-load ({before_kill} applied before the kill, {before_stop} before the stop)"
    );
    assert_eq!(cluster.quorum_members(&queue).len(), 3, "all three members are back");
    let stall_kill = probe.longest_stall(t_kill, t_stop);
    let stall_stop = probe.longest_stall(t_stop, t_back + Duration::from_secs(2));
    let _ = writeln!(
        std::io::stderr(),
        "rabbitmq cluster failover: {RUNS} runs in {:.1}s on 3 nodes (quorum queue members {members:?}); node 1 \
         SIGKILLed after {before_kill} webhooks and back {:.1}s later: longest stall {:.2}s; node 2 stop_app after \
         {before_stop} webhooks and start_app {:.1}s later: longest stall {:.2}s; {completed} completed, {blocked} \
         blocked with a reason, {applied} keys applied, 0 twice; {} starts refused meanwhile and sent again",
        started.elapsed().as_secs_f64(),
        back1.as_secs_f64(),
        stall_kill.as_secs_f64(),
        back2.as_secs_f64(),
        stall_stop.as_secs_f64(),
        refused.len(),
    );
}
