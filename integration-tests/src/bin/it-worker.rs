//! The demo worker, built inside this package so tests can spawn it as a real process
//! (`CARGO_BIN_EXE_it-worker`). Same code path as `savepoint-worker`.

#[tokio::main]
async fn main() -> std::process::ExitCode {
    savepoint_worker::cli::main().await
}
