//! `savepoint-scheduler`: the control plane process (HTTP API + due scanner). Thin.
#![forbid(unsafe_code)]

#[tokio::main]
async fn main() -> std::process::ExitCode {
    savepoint_scheduler::process::main().await
}
