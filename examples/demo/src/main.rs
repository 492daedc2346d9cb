//! `savepoint-worker`: hosts the demo workflows. A worker of your own is the same one call
//! with your registry (see `examples/custom_worker`).

fn main() -> std::process::ExitCode {
    savepoint_worker::main_with(|store| Ok(savepoint_demo::registry(store)))
}
