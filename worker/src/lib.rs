//! The Savepoint worker runtime: consumes step tasks, claims runs, replays journals, runs
//! live steps with a fenced commit each, and finishes, suspends or yields (ARCHITECTURE §7).
//!
//! Users build their own worker binary: register workflows in a
//! [`savepoint::workflow::Registry`] and hand it to [`main`]:
//!
//! ```no_run
//! # use savepoint::workflow::Registry;
//! fn main() -> std::process::ExitCode {
//!     let mut registry = Registry::new();
//!     // registry.register(MyWorkflow);
//!     savepoint_worker::main(registry)
//! }
//! ```
//!
//! [`main`] does what the `savepoint-worker` binary does: flags and config (file and
//! `SAVEPOINT_*` variables), logging and traces, SIGTERM/SIGINT, the health and metrics port,
//! and the worker until it is told to stop. [`main_with`] builds the registry from a
//! [`Setup`] (the loaded configuration), for workflows that need resources of their own.
//! [`run`] is the same worker without the process around it.
#![forbid(unsafe_code)]

pub mod cli;
mod handle;
mod heartbeat;
mod journals;
pub mod replay;
pub mod replay_check;
mod runtime;
mod setup;
mod shared;
mod slice;

pub use runtime::{run, run_with, StoreWrap, WorkerError, WorkerOptions};
/// The worker's configuration ([`Setup::config`], [`run`]).
pub use savepoint_runtime::config::Config;
pub use setup::Setup;

use savepoint::workflow::Registry;

/// A whole worker process serving `registry`: parses the flags, loads the config, starts
/// logging, handles SIGTERM/SIGINT (in-flight runs yield and are resumed elsewhere), serves
/// `/healthz`, `/readyz` and `/metrics`, and runs until stopped. Returns the process exit
/// code: 0 after a clean stop, 2 for a bad config, 1 for a failure (printed on stderr).
pub fn main(registry: Registry) -> std::process::ExitCode {
    main_with(move |_| Ok(registry))
}

/// [`main`] for workflows that need resources of their own (a provider's client, a pool, a
/// connection to your own Redis): once the configuration is loaded and validated, `make`
/// gets a [`Setup`] (the namespace, the Redis URL, the whole [`Config`]) and returns the
/// registry, or any error (`?` works on every error type), printed with exit code 2. `make`
/// runs inside the worker's async runtime but is not `async`: connect lazily (on first use)
/// or with a client that connects in the background.
///
/// ```no_run
/// # use savepoint::workflow::Registry;
/// # struct Payments; impl Payments { fn new(_: &str) -> Self { Payments } }
/// fn main() -> std::process::ExitCode {
///     savepoint_worker::main_with(|setup| {
///         let payments = Payments::new(&format!("{}:payments", setup.namespace()));
///         let mut registry = Registry::new();
///         // registry.register(Checkout::new(payments));
///         # let _ = payments;
///         Ok(registry)
///     })
/// }
/// ```
pub fn main_with<F>(make: F) -> std::process::ExitCode
where
    F: FnOnce(&Setup) -> anyhow::Result<Registry>,
{
    match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(rt) => rt.block_on(cli::main_with(make)),
        Err(e) => {
            eprintln!("savepoint-worker: cannot start the async runtime: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
