//! `savepoint-scheduler`: the control plane process (HTTP API + due scanner). Thin.
#![forbid(unsafe_code)]

/// The allocator: mimalloc, not glibc's malloc (docs/PERFORMANCE.md, "Where a step's CPU goes").
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() -> std::process::ExitCode {
    savepoint_scheduler::process::main().await
}
