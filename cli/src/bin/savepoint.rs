//! The `savepoint` CLI (see [`savepoint_cli::commands`]).
#![forbid(unsafe_code)]

fn main() -> std::process::ExitCode {
    savepoint_cli::main()
}
