//! The demo worker, built inside this package so tests can spawn it as a real process
//! (`CARGO_BIN_EXE_it-worker`). Same code path as `savepoint-worker`. `IT_WORKFLOWS`
//! (`name[@version[:min]],…`, see `demo::registry_from_spec`) makes it serve only those
//! workflows at those versions, standing in for another build in a mixed fleet.

fn main() -> std::process::ExitCode {
    let spec = std::env::var("IT_WORKFLOWS").ok().filter(|s| !s.trim().is_empty());
    savepoint_worker::main_with(move |setup| match spec {
        Some(spec) => Ok(savepoint_demo::registry_from_spec(setup.store(), &spec)?),
        None => Ok(savepoint_demo::registry(setup.store())),
    })
}
