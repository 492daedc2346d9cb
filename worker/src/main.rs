//! `savepoint-worker`: hosts the demo workflows. Thin: everything is in the library.

#[tokio::main]
async fn main() -> std::process::ExitCode {
    savepoint_worker::cli::main().await
}
