//! `savepoint-worker`: hosts the demo workflows. A worker of your own is the same one call
//! with your registry (see `examples/custom_worker`). The demo workflows keep their effects
//! log in the engine's own Redis keys, so they take the engine's store handle; a workflow of
//! yours builds its resources from `setup.config()` instead.

/// The allocator: mimalloc, not glibc's malloc (docs/PERFORMANCE.md, "Where a step's CPU goes").
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    savepoint_worker::main_with(|setup| Ok(savepoint_demo::registry(setup.store())))
}
