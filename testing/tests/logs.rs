//! What the worker logs: every block at WARN with the run's thread id and the reason, and each
//! field once per line (the task span carries the worker and thread ids; events inside it do
//! not repeat them).

use std::io::Write;
use std::sync::{Arc, Mutex};

use savepoint_demo::{registry, Invoice, InvoiceIn};
use savepoint_store::RunStatus;
use savepoint_testing::TestEnv;

/// A log sink the test reads back.
#[derive(Clone, Default)]
struct Sink(Arc<Mutex<Vec<u8>>>);

impl Write for Sink {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().expect("sink").extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for Sink {
    type Writer = Sink;
    fn make_writer(&'a self) -> Sink {
        self.clone()
    }
}

/// Runs the invoice until it blocks (the email in doubt) under the log filter `filter` and
/// returns what was logged and the run's thread id.
async fn blocked_run_logged(filter: &str) -> (String, String) {
    let sink = Sink::default();
    let subscriber = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(false)
        .with_writer(sink.clone())
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);
    let mut env = TestEnv::new(|setup| registry(setup.store())).await.expect("test env");
    // Killed between the email's call and its record: the email is in doubt (policy block).
    env.crash_at("effect.after_call=abort@2").expect("crash_at");
    let run = env
        .start::<Invoice>(&InvoiceIn {
            invoice_id: "INV-9".into(),
            pdf_path: None,
        })
        .await
        .expect("start");
    let done = env.settle(&run).await.expect("settle");
    assert_eq!(done.header.status, RunStatus::Blocked, "{:?}", done.header);
    env.shutdown().await;
    let text = String::from_utf8(sink.0.lock().expect("sink").clone()).expect("utf-8");
    (text, run.to_string())
}

#[tokio::test(start_paused = true)]
async fn a_block_is_logged_at_warn_with_the_thread_and_each_field_once() {
    // Warnings only (as the tests' worker processes and a quiet fleet run: the task span is
    // off), and everything (the span carries the ids).
    for filter in ["warn", "debug,lapin=warn"] {
        let (text, run) = blocked_run_logged(filter).await;
        let blocked: Vec<&str> = text.lines().filter(|l| l.contains("run blocked")).collect();
        assert_eq!(blocked.len(), 1, "{filter}: {text}");
        let line = blocked[0];
        assert!(line.contains(" WARN "), "{line}");
        assert!(line.contains(&format!("thread.id={run}")), "{filter}: {line}");
        assert!(line.contains("worker.id="), "{filter}: {line}");
        assert!(line.contains(&format!("email:{run} outcome unknown")), "{line}");
        let mut checked = 0;
        for l in text.lines() {
            for field in ["thread.id=", "worker.id=", "workflow=", "task.attempt="] {
                assert!(l.matches(field).count() <= 1, "{filter}: {field} twice in: {l}");
            }
            checked += 1;
        }
        assert!(checked >= 3, "{filter}: {text}");
    }
}
