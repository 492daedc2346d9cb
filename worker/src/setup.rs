//! What a worker of your own builds its registry from: [`Setup`], handed to the closure of
//! [`crate::main_with`] and of the test kit's `TestEnv::new`.

use savepoint_runtime::config::Config;
use savepoint_store::ScriptStore;

/// What the worker hands the closure that builds its registry, once its configuration is
/// loaded and validated: everything an author needs to build the resources their workflows
/// call (a client of their own for a payment provider, a database pool, a Redis connection of
/// their own), without naming the engine's types.
///
/// ```no_run
/// # use savepoint::workflow::Registry;
/// fn main() -> std::process::ExitCode {
///     savepoint_worker::main_with(|setup| {
///         // e.g. `MyShop::connect(setup.redis_url(), setup.namespace())?`
///         let mut registry = Registry::new();
///         // registry.register(MyWorkflow::new(shop));
///         let _ = (setup.namespace(), setup.redis_url(), &setup.config().worker.name);
///         Ok(registry)
///     })
/// }
/// ```
///
/// The same type reaches the closure of `savepoint_testing::TestEnv::new`, so one
/// `fn registry(setup: &Setup) -> …` can serve both; there the configuration is the kit's
/// (namespace `test`, and a `mem://…` Redis URL that names the in-process embedded engine,
/// which no client of your own can connect to: hand your workflows a stand-in in tests).
#[derive(Clone)]
pub struct Setup {
    config: Config,
    store: ScriptStore,
}

impl std::fmt::Debug for Setup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Setup")
            .field("namespace", &self.config.namespace)
            .field("worker", &self.config.worker.name)
            .finish_non_exhaustive()
    }
}

impl Setup {
    /// A setup over a validated configuration and the store connected from it (the worker
    /// and the test kit make one; an author never needs to).
    #[doc(hidden)]
    pub fn new(config: Config, store: ScriptStore) -> Self {
        Self { config, store }
    }

    /// The worker's whole configuration (after the config file, `SAVEPOINT_*` variables and
    /// flags), validated: its namespace, Redis and RabbitMQ URLs, worker name, concurrency…
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The namespace the worker serves (`SAVEPOINT_NAMESPACE`, `--namespace`): prefix your
    /// own keys or queues with it so two deployments on one server stay apart.
    pub fn namespace(&self) -> &str {
        &self.config.namespace
    }

    /// The Redis URL the worker checkpoints in (`SAVEPOINT_REDIS_URL`): `redis://`,
    /// `rediss://`, `redis+cluster://…`, or `mem://NAME` for the embedded engine (the test
    /// kit, `savepoint dev`), which only this process's engine can open.
    pub fn redis_url(&self) -> &str {
        &self.config.redis_url
    }

    /// The name this worker registers under (`SAVEPOINT_WORKER_NAME`).
    pub fn worker_name(&self) -> &str {
        &self.config.worker.name
    }

    /// The engine's own store handle. Savepoint's demo workflows keep their effects log in
    /// it; a workflow of yours should build its own resources from [`Setup::config`] instead:
    /// this handle's type and keys are the engine's, and change with it.
    #[doc(hidden)]
    pub fn store(&self) -> &ScriptStore {
        &self.store
    }
}
