#![allow(clippy::disallowed_methods)] // drives real processes in real time
//! `savepoint dev` on the embedded backend: the story with nothing but this binary, the
//! fallback when a service is unreachable, and the CLI driving a run through the API of an
//! embedded dev server exactly as it does against RabbitMQ and Redis.

use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_savepoint");

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

fn dev(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(BIN);
    cmd.arg("dev").args(args).env("SAVEPOINT_HTTP_ADDR", "127.0.0.1:0");
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().expect("savepoint dev runs")
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn assert_story(out: &str) {
    assert!(out.contains("backend embedded"), "{out}");
    assert!(out.contains("took over the expired lease"), "{out}");
    assert_eq!(out.matches("applied 1 time\n").count(), 2, "{out}");
    assert!(out.contains("Nothing was lost and nothing happened twice"), "{out}");
}

#[test]
fn the_story_runs_on_the_embedded_backend() {
    let o = dev(&["--embedded", "--exit-after-story"], &[]);
    let out = text(&o);
    assert!(o.status.success(), "{out}");
    assert_story(&out);
}

#[test]
fn an_unreachable_service_falls_back_to_embedded_unless_services_are_required() {
    let port = free_port();
    let dead = format!("redis://127.0.0.1:{port}");
    let o = dev(&["--exit-after-story"], &[("SAVEPOINT_REDIS_URL", &dead)]);
    let out = text(&o);
    assert!(o.status.success(), "{out}");
    assert!(out.contains("Redis is not reachable"), "{out}");
    assert_story(&out);

    let o = dev(
        &["--exit-after-story", "--require-services"],
        &[("SAVEPOINT_REDIS_URL", &dead)],
    );
    let out = text(&o);
    assert!(!o.status.success(), "{out}");
    assert!(
        out.contains("Redis is not reachable") && out.contains("--require-services"),
        "{out}"
    );
}

struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn cli(api: &str, args: &[&str]) -> (bool, serde_json::Value, String) {
    let o = Command::new(BIN)
        .args(["--api", api, "--json"])
        .args(args)
        .output()
        .expect("cli runs");
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    let v = serde_json::from_str(&out).unwrap_or(serde_json::Value::Null);
    (o.status.success(), v, text(&o))
}

fn wait_status(api: &str, thread: &str, want: &str) -> serde_json::Value {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (_, v, _) = cli(api, &["get", thread]);
        if v["status"] == want {
            return v;
        }
        assert!(Instant::now() < deadline, "run {thread} never became {want}: {v}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn the_cli_drives_an_approval_through_an_embedded_dev_server() {
    let port = free_port();
    let addr = format!("127.0.0.1:{port}");
    let api = format!("http://{addr}");
    let child = Command::new(BIN)
        .args(["dev", "--embedded", "--no-story"])
        .env("SAVEPOINT_HTTP_ADDR", &addr)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("dev server starts");
    let _server = Server(child);
    // Ready once the workers registered `approval` (a start before that is a clear 4xx).
    let deadline = Instant::now() + Duration::from_secs(30);
    let thread = loop {
        let (ok, v, out) = cli(&api, &["start", "approval"]);
        if ok {
            break v["thread_id"].as_str().expect("thread id").to_owned();
        }
        assert!(Instant::now() < deadline, "the dev server never accepted a run: {out}");
        std::thread::sleep(Duration::from_millis(100));
    };
    let v = wait_status(&api, &thread, "waiting");
    assert!(v.to_string().contains("gate"), "{v}");
    // `wait` gives up at its timeout on a run that is still going: exit code 6.
    let o = Command::new(BIN)
        .args(["--api", &api, "wait", &thread, "--timeout", "0.3"])
        .output()
        .expect("cli runs");
    assert_eq!(o.status.code(), Some(6), "{}", text(&o));
    // Answered, it ends; `wait` prints it and exits 0.
    let waiter = std::thread::spawn({
        let (api, thread) = (api.clone(), thread.clone());
        move || cli(&api, &["wait", &thread])
    });
    let (ok, _, out) = cli(&api, &["resume", &thread, "true"]);
    assert!(ok, "{out}");
    let (ok, v, out) = waiter.join().expect("wait thread");
    assert!(ok && v["status"] == "completed", "{out}");
    let v = wait_status(&api, &thread, "completed");
    assert!(v["output"].to_string().contains("true"), "{v}");
    let (ok, v, out) = cli(&api, &["list"]);
    assert!(ok, "{out}");
    assert!(v.to_string().contains(&thread), "{v}");
}
