//! The deploy gate as a command of a worker binary (`<worker> replay-check`, issue 28 §2):
//! the demo worker checks the live approval runs of a namespace against the workflows it
//! registers and exits 0; built to serve only a later version, it reports them not served
//! (they would wait for a worker, not block) and still exits 0.

use serde_json::json;
use std::time::Duration;

use savepoint_integration_tests::procs::env_of;
use savepoint_integration_tests::scenario::World;

const WORKER: &str = env!("CARGO_BIN_EXE_it-worker");

/// Runs `it-worker replay-check` on the world's namespace; (exit code, stdout).
fn replay_check(w: &World, extra: &[(&str, &str)]) -> (i32, String) {
    let mut cmd = std::process::Command::new(WORKER);
    cmd.env_clear().env("PATH", std::env::var("PATH").unwrap_or_default());
    for (k, v) in env_of(&w.cfg) {
        cmd.env(k, v);
    }
    cmd.envs(extra.iter().copied());
    let out = cmd
        .args(["replay-check", "--workflow", "approval"])
        .output()
        .expect("run it-worker");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    eprintln!("{stdout}{}", String::from_utf8_lossy(&out.stderr));
    (out.status.code().unwrap_or(-1), stdout)
}

#[tokio::test]
async fn a_worker_binary_checks_the_live_runs_before_a_deploy() {
    let w = World::new("replaygate", |_| {}).await;
    let mut worker = w.worker(WORKER, "w1", "");
    w.wait_registered("approval").await;
    let runs = [
        w.start("approval", json!({})).await,
        w.start("approval", json!({})).await,
    ];
    for t in &runs {
        w.wait_status(t, &["waiting"], Duration::from_secs(60)).await;
    }
    worker.signal("KILL");
    worker.wait_exit(Duration::from_secs(10)).await;
    let (code, out) = replay_check(&w, &[]);
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains("checked 2 live run(s)") && out.contains("2 clean, 0 through migrations, 0 would block"),
        "{out}"
    );
    // A build that serves approval from v2 only: the v1 runs wait for a worker of the old one.
    let (code, out) = replay_check(&w, &[("IT_WORKFLOWS", "approval@2:2")]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("NotServed: approval v1 (2 run(s)"), "{out}");
}
