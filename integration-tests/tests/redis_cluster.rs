//! Savepoint on a real Redis Cluster (6 nodes: 3 masters, 3 replicas, started by
//! `deploy/cluster/redis-cluster.sh` on this test's own ports), under the two things a cluster
//! does to its clients:
//!
//! - **Failover**: a master is SIGKILLed mid-load; its replica is promoted; the fleet (an
//!   in-process scheduler, three worker processes) reconnects. Every write waits for one
//!   replica (`SAVEPOINT_REDIS_WAIT_REPLICAS=1`, scope `writes`), so nothing acknowledged can
//!   be lost with the master. Checked at the provider (an HTTP receiver outside Redis): no key
//!   applied twice, every accepted run ends completed or blocked with a reason. Reported:
//!   the failover time and how much of the replication stream the replica had not received.
//! - **Resharding**: while runs are in flight, every slot of the namespace's partitions that
//!   one master serves is moved to another, keys and all (IMPORTING/MIGRATING, MIGRATE);
//!   clients meet ASK and TRYAGAIN. Nothing is lost or repeated.
//! - **A master restarted on its own address before any failover** (a fast pod restart): the
//!   clients' connections to it only time out; they must reconnect by themselves.
//!
//! The tests share the machine's 2 cores, so they run one after the other.

use std::io::Write;
use std::time::{Duration, Instant};

use savepoint_integration_tests::redis_cluster::{on, RedisCluster};
use savepoint_integration_tests::scenario::{quiet_counts, ProgressProbe, World};

const WORKER: &str = env!("CARGO_BIN_EXE_it-worker");
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

async fn world_on(cluster: &RedisCluster, prefix: &str) -> World {
    let url = cluster.url.clone();
    World::new(prefix, move |c| {
        c.redis_url = url;
        c.worker.slice_max_steps = 2;
        // `SAVEPOINT_TEST_CLUSTER_WAIT=off` runs without WAIT, to see what asynchronous
        // replication loses (the checks may then fail: that is what it measures).
        let off = std::env::var("SAVEPOINT_TEST_CLUSTER_WAIT").is_ok_and(|v| v == "off");
        c.redis_wait_replicas = u32::from(!off);
        c.redis_wait_scope = "writes".into();
        c.redis_wait_timeout_ms = 200;
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_master_killed_under_load_fails_over_and_nothing_is_lost_or_repeated() {
    let _one = ONE_AT_A_TIME.lock().await;
    let cluster = RedisCluster::start(7100);
    let w = world_on(&cluster, "rcf").await;
    let fleet = w.webhook_fleet(WORKER, 3).await;
    let (hook, provider) = (&fleet.hook, &fleet.provider);

    const RUNS: usize = 150;
    let started = Instant::now();
    let probe = ProgressProbe::start(provider);
    let submitter = w.submit_webhook_runs_retrying(hook, "fo", RUNS, Duration::from_millis(30));
    tokio::time::sleep(Duration::from_millis(1500)).await;
    // The master of partition 0's slot (a third of the runs' partitions are on it).
    let victim = cluster
        .master_of(cluster.base + 3, slot_of(cluster.base, "{p00}").await)
        .await;
    let replica = cluster.replica_of(cluster.base + 3, &victim).await;
    let offset_before = cluster.repl_offset(victim.port).await;
    let done_before = provider.snapshot().len();
    cluster.kill(victim.port);
    let killed = Instant::now();
    let promoted_in = cluster.wait_promoted(replica.port, Duration::from_secs(20)).await;
    let replica_had = cluster.promoted_at(replica.port).await;
    // The promoted master has no replica, so writes in WAIT's scope cannot be confirmed on
    // its slots (they are refused as not replicated, and retried) until the killed node,
    // restarted as an orchestrator would, rejoins as its replica.
    cluster.restart(victim.port);
    let rejoined_in = cluster.wait_replica_synced(victim.port, Duration::from_secs(30)).await;
    let refused = submitter.await.unwrap();
    let (completed, blocked) = w.settle("fo", RUNS).await;
    let (applied, twice) = quiet_counts(provider).await;
    let stall = probe.longest_stall(killed, probe.last_growth().unwrap_or(killed));
    let settled_in = probe.last_growth().unwrap_or(killed).saturating_duration_since(killed);
    if std::env::var("SAVEPOINT_TEST_CLUSTER_DEBUG").is_ok() {
        let mut last = Vec::new();
        for i in 0..RUNS {
            let t = savepoint_core::ids::ThreadId::new(format!("fo-{i}")).unwrap();
            let ev = w.store.events(&t, 1000).await.unwrap();
            let span = ev.last().map(|e| e.at).unwrap_or(0) - ev.first().map(|e| e.at).unwrap_or(0);
            last.push((span, t, ev));
        }
        last.sort_by_key(|(s, _, _)| std::cmp::Reverse(*s));
        for (span, t, ev) in last.iter().take(3) {
            let t0 = ev.first().map(|e| e.at).unwrap_or(0);
            let lines: Vec<String> = ev
                .iter()
                .map(|e| format!("+{} {} {}", e.at - t0, e.typ, e.detail))
                .collect();
            eprintln!("slow run {t} ({span} ms): {}", lines.join(" | "));
        }
    }
    assert!(twice.is_empty(), "keys applied twice after the failover: {twice:?}");
    assert!(
        applied >= completed,
        "every completed run applied its webhook ({applied} < {completed})"
    );
    assert!(
        done_before > 0 && done_before < RUNS,
        "the master died mid-load ({done_before} applied before)"
    );
    let _ = writeln!(
        std::io::stderr(),
        "redis cluster failover: {RUNS} runs in {:.1}s; master :{} SIGKILLed after {done_before} webhooks, replica :{} \
         promoted in {:.2}s (cluster-node-timeout 1000 ms), the killed node restarted and in sync as its replica {:.2}s \
         later; longest stall in webhooks applied after the kill {:.2}s, the last one {:.2}s after it; replication stream the replica had not received: {} \
         bytes (of offset {offset_before}; WAIT replicas: {}); {completed} completed, {blocked} blocked with a \
         reason, {applied} keys applied, 0 twice; {} starts refused meanwhile and sent again",
        started.elapsed().as_secs_f64(),
        victim.port,
        replica.port,
        promoted_in.as_secs_f64(),
        rejoined_in.as_secs_f64(),
        stall.as_secs_f64(),
        settled_in.as_secs_f64(),
        offset_before.saturating_sub(replica_had),
        w.cfg.redis_wait_replicas,
        refused.len(),
    );
}

async fn slot_of(port: u16, key: &str) -> u16 {
    on(port, redis::cmd("CLUSTER").arg("KEYSLOT").arg(key))
        .await
        .expect("KEYSLOT")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slots_moved_between_masters_with_runs_in_flight_lose_nothing() {
    let _one = ONE_AT_A_TIME.lock().await;
    let cluster = RedisCluster::start(7110);
    let w = world_on(&cluster, "rcr").await;
    let fleet = w.webhook_fleet(WORKER, 3).await;
    let (hook, provider) = (&fleet.hook, &fleet.provider);

    const RUNS: usize = 150;
    let started = Instant::now();
    let submitter = w.submit_webhook_runs_retrying(hook, "rs", RUNS, Duration::from_millis(30));
    tokio::time::sleep(Duration::from_millis(1500)).await;
    // Every slot of this namespace's tags ({pNN} runs, {fxNN} effect records) that the
    // first master serves moves to the second.
    let nodes = cluster.nodes(cluster.base).await;
    let masters: Vec<_> = nodes.iter().filter(|n| n.master).cloned().collect();
    let (from, to) = (&masters[0], &masters[1]);
    let mut slots = Vec::new();
    for p in 0..w.cfg.partitions {
        for tag in [format!("{{p{p:02}}}"), format!("{{fx{p:02}}}")] {
            let s = slot_of(cluster.base, &tag).await;
            if from.slots.iter().any(|(a, b)| (*a..=*b).contains(&s)) {
                slots.push(s);
            }
        }
    }
    assert!(
        !slots.is_empty(),
        "the first master serves some of the namespace's slots"
    );
    let t0 = Instant::now();
    let mut keys = 0;
    for s in &slots {
        keys += cluster.move_slot(*s, from, to).await;
    }
    let moved_in = t0.elapsed();
    let done_at_move = provider.snapshot().len();
    let refused = submitter.await.unwrap();
    let (completed, blocked) = w.settle("rs", RUNS).await;
    let (applied, twice) = quiet_counts(provider).await;
    assert!(twice.is_empty(), "keys applied twice across the resharding: {twice:?}");
    assert!(applied >= completed, "every completed run applied its webhook");
    assert!(
        keys > 0 && done_at_move < RUNS,
        "keys moved while runs were in flight ({keys} keys, {done_at_move} done)"
    );
    for s in &slots {
        assert_eq!(cluster.master_of(cluster.base, *s).await.id, to.id, "slot {s} moved");
    }
    let _ = writeln!(
        std::io::stderr(),
        "redis cluster resharding: {RUNS} runs in {:.1}s; {} slots ({keys} keys) moved from :{} to :{} in {:.2}s \
         while runs were in flight; {completed} completed, {blocked} blocked with a reason, {applied} keys applied, \
         0 twice; {} starts refused meanwhile and sent again",
        started.elapsed().as_secs_f64(),
        slots.len(),
        from.port,
        to.port,
        moved_in.as_secs_f64(),
        refused.len(),
    );
}

/// A master SIGKILLed under load and started again on its own address before any failover
/// (its replica may not take over: `cluster-replica-no-failover`), as a fast pod restart
/// does; it keeps its data in an append-only file fsynced on every write. The scheduler
/// (in-process) and the two worker processes held connections to it that now only time out;
/// they must reconnect to the restarted node by themselves. Every run ends, and at the
/// provider no key is applied twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_master_restarted_on_its_own_address_before_any_failover_is_reconnected() {
    let _one = ONE_AT_A_TIME.lock().await;
    // Redis's default node timeout: the node is back long before anyone marks it failed,
    // so no client hears CLUSTERDOWN; its connections to the node only time out.
    let cluster = RedisCluster::start_with(7120, 15_000);
    let slot = slot_of(cluster.base, "{p00}").await;
    let victim = cluster.master_of(cluster.base + 3, slot).await;
    let replica = cluster.replica_of(cluster.base + 3, &victim).await;
    let _: () = on(
        replica.port,
        redis::cmd("CONFIG")
            .arg("SET")
            .arg("cluster-replica-no-failover")
            .arg("yes"),
    )
    .await
    .expect("CONFIG SET");
    cluster.enable_aof(victim.port).await;
    let w = world_on(&cluster, "rcn").await;
    let fleet = w.webhook_fleet(WORKER, 2).await;
    let (hook, provider) = (&fleet.hook, &fleet.provider);

    const RUNS: usize = 100;
    let started = Instant::now();
    let submitter = w.submit_webhook_runs_retrying(hook, "rn", RUNS, Duration::from_millis(30));
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let done_before = provider.snapshot().len();
    cluster.kill(victim.port);
    tokio::time::sleep(Duration::from_secs(5)).await;
    cluster.restart_with_aof(victim.port);
    let back = Instant::now();
    let refused = submitter.await.unwrap();
    let (completed, blocked) = w.settle("rn", RUNS).await;
    let settled_in = back.elapsed();
    let (applied, twice) = quiet_counts(provider).await;
    assert!(twice.is_empty(), "keys applied twice across the restart: {twice:?}");
    assert!(applied >= completed, "every completed run applied its webhook");
    assert!(
        done_before > 0 && done_before < RUNS,
        "the master died mid-load ({done_before} applied before)"
    );
    assert_eq!(
        cluster.master_of(cluster.base + 3, slot).await.id,
        victim.id,
        "no failover happened: the restarted node serves its slots again"
    );
    let _ = writeln!(
        std::io::stderr(),
        "redis cluster master restart without failover: {RUNS} runs in {:.1}s; master :{} SIGKILLed after \
         {done_before} webhooks and started again on its address 5 s later (node timeout 15 s); every run ended {:.1}s after it was \
         back; {completed} completed, {blocked} blocked with a reason, {applied} keys applied, 0 twice; {} starts \
         refused meanwhile and sent again",
        started.elapsed().as_secs_f64(),
        victim.port,
        settled_in.as_secs_f64(),
        refused.len(),
    );
}
