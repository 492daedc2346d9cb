//! `savepoint-worker`: hosts the demo workflows. A worker of your own is the same one call
//! with your registry (see `examples/custom_worker`). The demo workflows keep their effects
//! log in the engine's own Redis keys, so they take the engine's store handle; a workflow of
//! yours builds its resources from `setup.config()` instead.

fn main() -> std::process::ExitCode {
    savepoint_worker::main_with(|setup| Ok(savepoint_demo::registry(setup.store())))
}
