//! The `savepoint` CLI (see `savepoint_scheduler::cli`).
#![forbid(unsafe_code)]

fn main() -> std::process::ExitCode {
    savepoint_scheduler::cli::main()
}
