//! The `savepoint` CLI (see [`savepoint_cli::commands`]).
#![forbid(unsafe_code)]

/// The allocator: mimalloc, not glibc's malloc (docs/PERFORMANCE.md, "Where a step's CPU goes").
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    savepoint_cli::main()
}
