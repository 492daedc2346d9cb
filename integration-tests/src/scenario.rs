//! A test world: a fresh namespace, an in-process scheduler (API + due scanner), a store
//! handle, an HTTP client, and helpers to spawn real worker processes and inspect runs.

use serde_json::{json, Value};
use std::time::{Duration, Instant};

use savepoint_core::ids::ThreadId;
use savepoint_runtime::config::Config;
use savepoint_store::ScriptStore;

use crate::procs::Proc;
use crate::{backend_ready, fresh_namespace, start_scheduler, test_config, SchedulerHandle};
use savepoint_cli::loadgen::receiver::{self, Deliveries, ReceiverOptions};

/// One test's world.
pub struct World {
    /// Its config (fresh namespace, short leases).
    pub cfg: Config,
    /// The in-process scheduler.
    pub sched: SchedulerHandle,
    /// Store handle on the namespace.
    pub store: ScriptStore,
    /// HTTP client.
    pub http: reqwest::Client,
}

impl World {
    /// A world with an in-process scheduler; `tune` may adjust the config first.
    pub async fn new(prefix: &str, tune: impl FnOnce(&mut Config)) -> Self {
        backend_ready().await;
        let mut cfg = test_config(&fresh_namespace(prefix));
        tune(&mut cfg);
        let sched = start_scheduler(&cfg).await;
        let store = ScriptStore::connect(&cfg.redis_url, cfg.keys(), cfg.store())
            .await
            .expect("redis");
        Self {
            cfg,
            sched,
            store,
            http: reqwest::Client::new(),
        }
    }

    /// Spawns a worker process (the `it-worker` binary at `bin`) with these failpoints.
    pub fn worker(&self, bin: &str, name: &str, failpoints: &str) -> Proc {
        let mut cfg = self.cfg.clone();
        cfg.failpoints = failpoints.to_owned();
        Proc::spawn(bin, name, &cfg, &[("SAVEPOINT_WORKER_NAME", name)])
    }

    /// Spawns a scheduler process (`bin`) on `cfg` with an HTTP port of its own and waits
    /// until it is ready; returns it and its base URL.
    pub async fn scheduler_proc(&self, bin: &str, name: &str, cfg: &Config) -> (Proc, String) {
        let addr = format!("127.0.0.1:{}", crate::procs::free_port());
        let p = Proc::spawn(bin, name, cfg, &[("SAVEPOINT_HTTP_ADDR", &addr)]);
        let base = format!("http://{addr}");
        crate::wait_until(Duration::from_secs(30), "a scheduler process is ready", || {
            let (http, url) = (self.http.clone(), format!("{base}/readyz"));
            async move {
                http.get(url)
                    .send()
                    .await
                    .is_ok_and(|r| r.status().is_success())
                    .then_some(())
            }
        })
        .await;
        (p, base)
    }

    /// Spawns a worker process with these failpoints and extra environment (e.g. another
    /// `SAVEPOINT_REDIS_URL`, `SAVEPOINT_WORKER_HTTP_ADDR`, `IT_WORKFLOWS`).
    pub fn worker_env(&self, bin: &str, name: &str, failpoints: &str, extra: &[(&str, &str)]) -> Proc {
        let mut cfg = self.cfg.clone();
        cfg.failpoints = failpoints.to_owned();
        let mut env = vec![("SAVEPOINT_WORKER_NAME", name)];
        env.extend_from_slice(extra);
        Proc::spawn(bin, name, &cfg, &env)
    }

    /// Waits until some worker registered `workflow` in the catalog.
    pub async fn wait_registered(&self, workflow: &str) {
        let deadline = Instant::now() + Duration::from_secs(30);
        while self.store.catalog_entry(workflow).await.expect("catalog").is_none() {
            assert!(Instant::now() < deadline, "no worker registered {workflow}");
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }

    /// POST a JSON body; returns (status, body).
    pub async fn post(&self, path: &str, body: Value) -> (u16, Value) {
        let r = self
            .http
            .post(format!("{}{path}", self.sched.base_url))
            .json(&body)
            .send()
            .await
            .expect("api reachable");
        let status = r.status().as_u16();
        (status, r.json().await.unwrap_or(Value::Null))
    }

    /// GET; returns (status, body).
    pub async fn get(&self, path: &str) -> (u16, Value) {
        let r = self
            .http
            .get(format!("{}{path}", self.sched.base_url))
            .send()
            .await
            .expect("api reachable");
        let status = r.status().as_u16();
        (status, r.json().await.unwrap_or(Value::Null))
    }

    /// Starts a run through the API; returns its thread id.
    pub async fn start(&self, workflow: &str, input: Value) -> ThreadId {
        let (status, body) = self
            .post("/v1/runs", json!({"workflow": workflow, "input": input}))
            .await;
        assert_eq!(status, 201, "start {workflow}: {body}");
        ThreadId::new(body["thread_id"].as_str().expect("thread_id").to_owned()).expect("valid id")
    }

    /// The run as the API shows it.
    pub async fn run(&self, t: &ThreadId) -> Value {
        let (status, body) = self.get(&format!("/v1/runs/{t}")).await;
        assert_eq!(status, 200, "get {t}: {body}");
        body
    }

    /// Waits until the run's status is one of `want`; returns the run.
    pub async fn wait_status(&self, t: &ThreadId, want: &[&str], timeout: Duration) -> Value {
        self.wait_run(t, &format!("{want:?}"), timeout, |run| {
            want.contains(&run["status"].as_str().unwrap_or(""))
        })
        .await
    }

    /// Waits until the run waits for `name` (a signal's, an interrupt's or a child's wait:
    /// `wait.name` of its view); returns the run. A run that waits at an earlier call is
    /// `waiting` too, so a test that means one wait names it.
    pub async fn wait_waiting_for(&self, t: &ThreadId, name: &str, timeout: Duration) -> Value {
        self.wait_run(t, &format!("waiting for {name:?}"), timeout, |run| {
            run["status"] == "waiting" && run["wait"]["name"] == name
        })
        .await
    }

    /// Polls the run until `done(run)`; panics with its view and history after `timeout`.
    async fn wait_run(&self, t: &ThreadId, want: &str, timeout: Duration, done: impl Fn(&Value) -> bool) -> Value {
        let deadline = Instant::now() + timeout;
        loop {
            let run = self.run(t).await;
            if done(&run) {
                return run;
            }
            if Instant::now() > deadline {
                let (_, hist) = self.get(&format!("/v1/runs/{t}/history")).await;
                panic!(
                    "run {t} is {} after {timeout:?}, wanted {want}\nrun: {run}\nhistory: {hist}",
                    run["status"]
                );
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }

    /// The demo effects log of this namespace.
    pub async fn effects(&self) -> Vec<Value> {
        let raw: Vec<String> = self
            .store
            .query(
                redis::cmd("LRANGE")
                    .arg(self.store.keys().demo_effects())
                    .arg(0)
                    .arg(-1),
            )
            .await
            .expect("lrange");
        raw.iter().filter_map(|s| serde_json::from_str(s).ok()).collect()
    }

    /// How many times each effect key was applied.
    pub async fn effect_counts(&self) -> std::collections::BTreeMap<String, usize> {
        let mut out = std::collections::BTreeMap::new();
        for r in self.effects().await {
            *out.entry(r["key"].as_str().unwrap_or("").to_owned()).or_insert(0) += 1;
        }
        out
    }

    /// Event types of a run, in order.
    pub async fn event_types(&self, t: &ThreadId) -> Vec<String> {
        self.store
            .events(t, 1000)
            .await
            .expect("events")
            .into_iter()
            .map(|e| e.typ)
            .collect()
    }
}

/// Webhook runs submitted in the background at a steady pace, for the fleet chaos tests.
pub struct Submitter {
    /// The task submitting them; it panics if a start is refused.
    pub task: tokio::task::JoinHandle<()>,
    /// The runs accepted so far, in order.
    pub accepted: std::sync::Arc<std::sync::Mutex<Vec<ThreadId>>>,
}

impl World {
    /// Starts `runs` `webhook` runs (6 steps, the effect at step 3 under policy `block`,
    /// posting to `hook`) with thread ids `<prefix>-<i>`, one every `every` from now.
    pub fn submit_webhook_runs(&self, hook: &str, prefix: &str, runs: usize, every: Duration) -> Submitter {
        let accepted = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let (acc, base, hook, prefix) = (
            accepted.clone(),
            self.sched.base_url.clone(),
            hook.to_owned(),
            prefix.to_owned(),
        );
        let started = tokio::time::Instant::now();
        let task = tokio::spawn(async move {
            let http = reqwest::Client::new();
            for i in 0..runs {
                tokio::time::sleep_until(started + every * i as u32).await;
                let thread = format!("{prefix}-{i}");
                let input = json!({"url": hook, "steps": 6, "effect_at": 3, "policy": "block"});
                let body = json!({"workflow": "webhook", "input": input, "thread_id": thread});
                let r = http
                    .post(format!("{base}/v1/runs"))
                    .json(&body)
                    .send()
                    .await
                    .expect("api");
                assert_eq!(r.status().as_u16(), 201, "start {thread}");
                acc.lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .push(ThreadId::new(thread).expect("valid id"));
            }
        });
        Submitter { task, accepted }
    }
}

impl World {
    /// Starts `runs` webhook runs (6 steps, the effect at step 3, policy `block`, posting to
    /// `hook`) `<prefix>-<i>`, one every `every`; a start the API refuses
    /// (503 while a master is down) is sent again with the same thread id until it is accepted
    /// (the thread id makes the start idempotent).
    pub fn submit_webhook_runs_retrying(
        &self,
        hook: &str,
        prefix: &str,
        runs: usize,
        every: Duration,
    ) -> tokio::task::JoinHandle<Vec<String>> {
        let (base, hook, prefix) = (self.sched.base_url.clone(), hook.to_owned(), prefix.to_owned());
        tokio::spawn(async move {
            let http = reqwest::Client::new();
            let mut refused = Vec::new();
            let t0 = tokio::time::Instant::now();
            for i in 0..runs {
                tokio::time::sleep_until(t0 + every * i as u32).await;
                let thread = format!("{prefix}-{i}");
                let input = json!({"url": hook, "steps": 6, "effect_at": 3, "policy": "block"});
                let body = json!({"workflow": "webhook", "input": input, "thread_id": thread});
                let deadline = Instant::now() + Duration::from_secs(30);
                loop {
                    let r = http.post(format!("{base}/v1/runs")).json(&body).send().await;
                    match r.map(|r| r.status().as_u16()) {
                        Ok(200 | 201) => break,
                        other => {
                            refused.push(format!("{thread}: {other:?}"));
                            assert!(Instant::now() < deadline, "start {thread} refused for 30 s: {other:?}");
                            tokio::time::sleep(Duration::from_millis(100)).await;
                        }
                    }
                }
            }
            refused
        })
    }

    /// Waits until every run `<prefix>-<i>` is completed or blocked with a reason; returns the counts.
    pub async fn settle(&self, prefix: &str, runs: usize) -> (usize, usize) {
        let threads: Vec<ThreadId> = (0..runs)
            .map(|i| ThreadId::new(format!("{prefix}-{i}")).unwrap())
            .collect();
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            let (mut completed, mut blocked, mut open) = (0, 0, Vec::new());
            for t in &threads {
                let h = self
                    .store
                    .header(t)
                    .await
                    .expect("read")
                    .unwrap_or_else(|| panic!("run {t} was lost"));
                match h.status.as_str() {
                    "completed" => completed += 1,
                    "blocked" => {
                        blocked += 1;
                        assert!(
                            !h.reason.clone().unwrap_or_default().is_empty(),
                            "{t} blocked without a reason"
                        );
                    }
                    "failed" | "cancelled" => panic!("run {t} ended {}: {}", h.status.as_str(), self.run(t).await),
                    _ => open.push(t.clone()),
                }
            }
            if open.is_empty() {
                return (completed, blocked);
            }
            assert!(
                Instant::now() < deadline,
                "{} runs still open, e.g. {}",
                open.len(),
                self.run(&open[0]).await
            );
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }
}

/// Counts at the provider once it is quiet: (keys applied, keys applied twice).
pub async fn quiet_counts(provider: &Deliveries) -> (usize, Vec<(String, u32)>) {
    let quiet = Instant::now() + Duration::from_secs(10);
    while provider.in_flight() > 0 && Instant::now() < quiet {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let counts = provider.snapshot();
    let twice = counts
        .iter()
        .filter(|(_, n)| **n > 1)
        .map(|(k, n)| (k.clone(), *n))
        .collect();
    (counts.len(), twice)
}

/// Samples how many keys the provider has applied, every 20 ms, so a test can tell how long
/// the fleet made no progress around a fault.
pub struct ProgressProbe {
    samples: std::sync::Arc<std::sync::Mutex<Vec<(Instant, usize)>>>,
    task: tokio::task::JoinHandle<()>,
}

impl ProgressProbe {
    /// Starts sampling `provider`.
    pub fn start(provider: &Deliveries) -> Self {
        let samples = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let (out, provider) = (samples.clone(), provider.clone());
        let task = tokio::spawn(async move {
            loop {
                let n = provider.snapshot().len();
                out.lock().unwrap_or_else(|p| p.into_inner()).push((Instant::now(), n));
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        });
        Self { samples, task }
    }

    /// When the count last grew.
    pub fn last_growth(&self) -> Option<Instant> {
        let s = self.samples.lock().unwrap_or_else(|p| p.into_inner());
        s.windows(2).rev().find(|w| w[1].1 > w[0].1).map(|w| w[1].0)
    }

    /// The longest time in `from..to` during which the count did not grow (a stall).
    pub fn longest_stall(&self, from: Instant, to: Instant) -> Duration {
        let s = self.samples.lock().unwrap_or_else(|p| p.into_inner());
        let (mut longest, mut since, mut last) = (Duration::ZERO, from, None);
        for (at, n) in s.iter().filter(|(at, _)| *at >= from && *at <= to) {
            if last.is_some_and(|l| *n > l) {
                since = *at;
            }
            last = Some(*n);
            longest = longest.max(at.duration_since(since));
        }
        longest
    }
}

impl Drop for ProgressProbe {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Worker processes serving `webhook`, and the HTTP provider their effects post to (outside
/// Redis, so what it counts is the truth whatever happens to the store). Dropping it stops
/// the provider and the workers.
pub struct WebhookFleet {
    /// The provider's URL (the runs' `url`).
    pub hook: String,
    /// What the provider applied.
    pub provider: Deliveries,
    /// The worker processes.
    pub workers: Vec<Proc>,
    stop: tokio_util::sync::CancellationToken,
}

impl Drop for WebhookFleet {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

impl World {
    /// Starts the provider (10 ms a request, fencing tokens not checked: the engine alone must
    /// keep keys from being applied twice) and `n` worker processes, and waits until `webhook`
    /// is served.
    pub async fn webhook_fleet(&self, bin: &str, n: usize) -> WebhookFleet {
        let stop = tokio_util::sync::CancellationToken::new();
        let opts = ReceiverOptions {
            delay: Duration::from_millis(10),
            check_tokens: false,
        };
        let (hook, provider) = receiver::start_with(stop.clone(), opts).await.expect("provider");
        let workers = (0..n).map(|i| self.worker(bin, &format!("w{i}"), "")).collect();
        self.wait_registered("webhook").await;
        WebhookFleet {
            hook,
            provider,
            workers,
            stop,
        }
    }
}
