//! The scheduler process, built inside this package so tests can spawn it
//! (`CARGO_BIN_EXE_it-scheduler`). Same code path as `savepoint-scheduler`.

#[tokio::main]
async fn main() -> std::process::ExitCode {
    savepoint_scheduler::process::main().await
}
