//! The operator console in a real browser (headless Debian chromium, driven by Playwright's
//! `playwright-core`; `integration-tests/browser/console.test.mjs`), against the in-process
//! scheduler and real worker processes on RabbitMQ and Redis. This test brings the fleet into
//! shape — the seed's invoice story with a worker killed after the ledger post, an approval
//! waiting for a human, a run blocked on an email whose outcome is unknown — then runs the
//! browser script, then checks at the provider that nothing happened twice. Screenshots of
//! every page land in `target/console-screenshots/console/` (printed at the end).

use serde_json::json;
use std::process::Stdio;
use std::time::Duration;

use savepoint_integration_tests::browser::{chromium, node_modules, screenshots};
use savepoint_integration_tests::cleanup;
use savepoint_integration_tests::procs::{free_port, killed_by_signal};
use savepoint_integration_tests::scenario::World;

const WORKER: &str = env!("CARGO_BIN_EXE_it-worker");
const LONG: Duration = Duration::from_secs(40);

#[tokio::test]
async fn the_console_explains_runs_answers_approvals_and_resolves_in_doubt_effects_in_a_browser() {
    let chromium = chromium();
    let modules = node_modules();
    let w = World::new("console", |_| {}).await;

    // The story: a1 posts the ledger and dies before recording it; b takes over, finds the
    // post applied (reconcile), sends the email once.
    let mut a1 = w.worker(WORKER, "a1", "effect.after_call=abort@1");
    w.wait_registered("invoice").await;
    let story = w.start("invoice", json!({"invoice_id": "INV-STORY"})).await;
    assert!(
        killed_by_signal(&a1.wait_exit(LONG).await),
        "a1 dies after the ledger post"
    );
    let mut b = w.worker(WORKER, "b", "");
    w.wait_status(&story, &["completed"], LONG).await;
    b.signal("TERM");
    b.wait_exit(LONG).await;

    // The in-doubt run: a2 sends the email and dies before recording it; b2 finds its intent
    // and blocks the run until someone who checked the provider resolves it.
    let mut a2 = w.worker(WORKER, "a2", "effect.after_call=abort@2");
    w.wait_registered("invoice").await;
    let doubt = w.start("invoice", json!({"invoice_id": "INV-DOUBT"})).await;
    assert!(
        killed_by_signal(&a2.wait_exit(LONG).await),
        "a2 dies after the email call"
    );
    let http = format!("127.0.0.1:{}", free_port());
    let _b2 = w.worker_env(WORKER, "b2", "", &[("SAVEPOINT_WORKER_HTTP_ADDR", &http)]);
    let run = w.wait_status(&doubt, &["blocked"], LONG).await;
    let key = run["blocked_effect"].as_str().expect("blocked on an effect").to_owned();
    assert_eq!(key, format!("email:{doubt}"));

    // The approval, waiting for a human.
    let approval = w.start("approval", json!({})).await;
    w.wait_status(&approval, &["waiting"], LONG).await;

    let shots = screenshots("console");
    let script = savepoint_integration_tests::browser::browser_dir().join("console.test.mjs");
    let out = tokio::process::Command::new("node")
        .arg(&script)
        .env("NODE_PATH", modules)
        .env("BASE", &w.sched.base_url)
        .env("STORY", story.as_str())
        .env("APPROVAL", approval.as_str())
        .env("DOUBT", doubt.as_str())
        .env("DOUBT_KEY", &key)
        .env("SHOTS", &shots)
        .env("CHROMIUM", &chromium)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(Duration::from_secs(240), out)
        .await
        .expect("the browser script finished within 240 s")
        .expect("node runs (Node.js is needed for the browser tests)");
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    println!("{stdout}");
    eprintln!("{stderr}");
    assert!(
        out.status.success(),
        "the browser checks failed (screenshots in {}):\n{stdout}\n{stderr}",
        shots.display()
    );
    assert_eq!(
        stdout.matches("\nok - ").count() + usize::from(stdout.starts_with("ok - ")),
        10,
        "{stdout}"
    );

    // At the provider: one ledger post and one email per invoice, whatever the crashes and
    // the resolve did.
    let counts = w.effect_counts().await;
    for inv in ["INV-STORY", "INV-DOUBT"] {
        assert_eq!(counts.get(&format!("ledger:{inv}")), Some(&1), "{counts:?}");
    }
    assert_eq!(counts.get(&format!("email:{story}")), Some(&1), "{counts:?}");
    assert_eq!(
        counts.get(&format!("email:{doubt}")),
        Some(&1),
        "resolved as applied, not sent again: {counts:?}"
    );
    let (_, hist) = w.get(&format!("/v1/runs/{doubt}/history")).await;
    assert!(
        hist["events"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["type"] == "effect_resolved"),
        "{hist}"
    );
    println!("console screenshots: {}", shots.display());
    cleanup(&w.cfg).await;
}

/// The rows (thread ids) of a runs page and its "older" link.
fn rows_and_next(html: &str) -> (Vec<String>, Option<String>) {
    let rows = html
        .split("<tr class=\"run\" data-thread=\"")
        .skip(1)
        .filter_map(|s| s.split('"').next())
        .map(str::to_owned)
        .collect();
    let next = html
        .split("\" id=\"older\"")
        .next()
        .filter(|_| html.contains("id=\"older\""))
        .and_then(|s| s.rsplit("href=\"").next())
        .map(|s| s.replace("&amp;", "&").replace("&#38;", "&"));
    (rows, next)
}

async fn page(w: &World, path: &str) -> String {
    let r = w
        .http
        .get(format!("{}{path}", w.sched.base_url))
        .send()
        .await
        .expect("console reachable");
    assert_eq!(r.status(), 200, "{path}");
    r.text().await.expect("html")
}

/// Past 1,000 runs: walking the "older" links of a filtered list visits every run once,
/// newest first; the other filters (prefix, status, time range) narrow it.
#[tokio::test]
async fn the_runs_list_pages_past_a_thousand_runs_and_filters() {
    // One partition: all 1,050 ties in one index (more than a page's query returns at once).
    let w = World::new("console-pages", |c| c.partitions = 1).await;
    let mut bulk = Vec::new();
    for i in 0..1_050 {
        let t = savepoint_core::ids::ThreadId::new(format!("bulk-{i:05}")).unwrap();
        w.store.create(&t, "bulk", 1, "{}", "").await.expect("create");
        bulk.push(t.as_str().to_owned());
    }
    for i in 0..60 {
        let t = savepoint_core::ids::ThreadId::new(format!("oth-{i:03}")).unwrap();
        w.store.create(&t, "other", 1, "{}", "").await.expect("create");
    }
    // Every bulk run indexed at the same millisecond: pages must break ties by thread id, not
    // skip or repeat them.
    let tied = w.store.server_time().await.unwrap();
    for t in &bulk {
        let t = savepoint_core::ids::ThreadId::new(t.clone()).unwrap();
        let index = w.store.keys().index(w.store.keys().partition(&t));
        let _: i64 = w
            .store
            .query(redis::cmd("ZADD").arg(index).arg(tied).arg(t.as_str()))
            .await
            .unwrap();
    }
    let (mut seen, mut next, mut pages) = (Vec::new(), Some("/ui?workflow=bulk&limit=200".to_owned()), 0);
    while let Some(path) = next {
        let html = page(&w, &path).await;
        let (rows, older) = rows_and_next(&html);
        assert!(rows.len() <= 200, "{path}: {} rows", rows.len());
        seen.extend(rows);
        next = older;
        pages += 1;
        assert!(pages <= 7, "too many pages: {path} -> {next:?}, {} seen", seen.len());
    }
    bulk.reverse();
    assert_eq!(seen, bulk, "every run once, newest first, over {pages} pages");
    assert_eq!(pages, 6, "1,050 runs in pages of 200");
    let first = page(&w, "/ui").await;
    assert!(first.contains("all <b>1110</b>"), "the count of all runs");
    let (rows, _) = rows_and_next(&page(&w, "/ui?prefix=oth-&limit=200").await);
    assert_eq!(rows.len(), 60);
    assert!(rows.iter().all(|r| r.starts_with("oth-")));
    let (rows, _) = rows_and_next(&page(&w, "/ui?status=blocked").await);
    assert!(rows.is_empty());
    let (rows, _) = rows_and_next(&page(&w, "/ui?from=2100-01-01T00:00").await);
    assert!(rows.is_empty(), "nothing created after 2100");
    let (rows, _) = rows_and_next(&page(&w, "/ui?to=2000-01-01T00:00").await);
    assert!(rows.is_empty(), "nothing created before 2000");
    let (rows, _) = rows_and_next(&page(&w, "/ui?since=1h&workflow=other&limit=200").await);
    assert_eq!(rows.len(), 60);
    // A bad filter says so on the page and shows the unfiltered list.
    let bad = page(&w, "/ui?status=sleepy&from=yesterday").await;
    assert!(
        bad.contains("cannot read the time &quot;yesterday&quot;")
            || bad.contains("cannot read the time &#34;yesterday&#34;"),
        "{bad}"
    );
    // A run that does not exist is a 404 page, not a blank one.
    let r = w
        .http
        .get(format!("{}/ui/runs/nope", w.sched.base_url))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);
    assert!(r.text().await.unwrap().contains("run nope not found"));
    cleanup(&w.cfg).await;
}
