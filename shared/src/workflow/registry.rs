//! Type-erased workflows, registered by name.

use futures::future::BoxFuture;
use serde_json::Value;
use std::collections::BTreeMap;
use std::sync::Arc;

use super::{Ctx, RetryPolicy, Workflow, WorkflowError};
use savepoint_core::outcome::CatalogEntry;

/// Why a run's body ended in error.
#[derive(Debug, Clone, thiserror::Error)]
pub enum RunError {
    /// The workflow returned an error.
    #[error("{0}")]
    Workflow(WorkflowError),
    /// The run's input does not decode into the workflow's input type.
    #[error("invalid input: {0}")]
    Input(String),
    /// The output does not encode as JSON.
    #[error("output does not encode as JSON: {0}")]
    Output(String),
}

/// A workflow behind a trait object.
pub trait DynWorkflow: Send + Sync {
    /// Name.
    fn name(&self) -> &'static str;
    /// Newest version.
    fn version(&self) -> u32;
    /// Oldest version served.
    fn min_version(&self) -> u32;
    /// Default retry policy.
    fn retry_policy(&self) -> RetryPolicy;
    /// Schemas of the values it takes from outside.
    fn schemas(&self) -> super::Schemas;
    /// Its versioned value types (computed once, at registration).
    fn versions(&self) -> Arc<super::Versions>;
    /// The version of its input's type (`None`: 1).
    fn input_version(&self) -> Option<u32>;
    /// The name of its input's type, when it declares a version of it above 1.
    fn input_type(&self) -> Option<&'static str>;
    /// The version of its output's type (1 for a type it does not declare above 1): a
    /// completed run keeps it with its output, so a parent awaiting the run as a child
    /// upgrades the output from there (and knows the version was recorded: §8c).
    fn output_version(&self) -> Option<savepoint_core::model::OutputVersion>;
    /// Runs the body on JSON input.
    fn run<'a>(&'a self, ctx: &'a Ctx, input: Value) -> BoxFuture<'a, Result<Value, RunError>>;
}

struct Erased<W> {
    w: W,
    version: u32,
    min_version: u32,
    versions: Arc<super::Versions>,
}

impl<W: Workflow> DynWorkflow for Erased<W> {
    fn name(&self) -> &'static str {
        W::NAME
    }
    fn version(&self) -> u32 {
        self.version
    }
    fn min_version(&self) -> u32 {
        self.min_version
    }
    fn retry_policy(&self) -> RetryPolicy {
        self.w.retry_policy()
    }
    fn schemas(&self) -> super::Schemas {
        W::DECLARED.iter().fold(self.w.schemas(), |s, handle| handle.declare(s))
    }
    fn versions(&self) -> Arc<super::Versions> {
        self.versions.clone()
    }
    fn input_version(&self) -> Option<u32> {
        self.versions.version_of::<W::Input>()
    }
    fn input_type(&self) -> Option<&'static str> {
        self.versions.name_of::<W::Input>()
    }
    fn output_version(&self) -> Option<savepoint_core::model::OutputVersion> {
        Some(savepoint_core::model::OutputVersion {
            type_name: self.versions.name_of::<W::Output>().unwrap_or_default().to_owned(),
            version: self.versions.version_of::<W::Output>().unwrap_or(1),
        })
    }
    fn run<'a>(&'a self, ctx: &'a Ctx, input: Value) -> BoxFuture<'a, Result<Value, RunError>> {
        Box::pin(async move {
            // An input the starting code stamped with an older version of its type is
            // upgraded first (a run blocks on one it cannot upgrade).
            let input = ctx.upgraded_input::<W::Input>(input).await;
            let input: W::Input = serde_json::from_value(input).map_err(|e| RunError::Input(e.to_string()))?;
            let out = self.w.run(ctx, input).await;
            // Calls the workflow dropped unfinished are dealt with before its end is taken
            // (an effect dropped while its function ran blocks the run, whatever it returned).
            ctx.settle_dropped().await;
            let out = out.map_err(RunError::Workflow)?;
            serde_json::to_value(out).map_err(|e| RunError::Output(e.to_string()))
        })
    }
}

/// The workflows a worker serves.
#[derive(Clone, Default)]
pub struct Registry {
    map: BTreeMap<String, Arc<dyn DynWorkflow>>,
}

impl Registry {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// Registers a workflow under its name (replacing one of the same name).
    pub fn register<W: Workflow>(&mut self, w: W) -> &mut Self {
        self.register_versions(w, W::VERSION, W::MIN_VERSION)
    }

    /// Registers a workflow serving the recorded versions `min_version..=version` instead of
    /// its constants (a worker build that pins what it serves, or a test standing in for two
    /// builds of one workflow).
    pub fn register_versions<W: Workflow>(&mut self, w: W, version: u32, min_version: u32) -> &mut Self {
        let e = Erased {
            versions: Arc::new(W::versions()),
            w,
            version,
            min_version: min_version.min(version),
        };
        self.map.insert(W::NAME.to_owned(), Arc::new(e));
        self
    }

    /// Keeps only the workflows whose names are listed.
    pub fn retain(&mut self, names: &[&str]) -> &mut Self {
        self.map.retain(|k, _| names.contains(&k.as_str()));
        self
    }

    /// The workflow of that name.
    pub fn get(&self, name: &str) -> Option<Arc<dyn DynWorkflow>> {
        self.map.get(name).cloned()
    }

    /// Names served.
    pub fn names(&self) -> Vec<String> {
        self.map.keys().cloned().collect()
    }

    /// The served workflows' schemas, by `name@version` for every version each serves.
    pub fn schemas(&self) -> Vec<(String, super::Schemas)> {
        let mut out = Vec::new();
        for w in self.map.values() {
            let s = w.schemas();
            if s.is_empty() {
                continue;
            }
            for v in w.min_version()..=w.version() {
                out.push((format!("{}@{v}", w.name()), s.clone()));
            }
        }
        out
    }

    /// Catalog entries for the fleet's workflow catalog.
    pub fn catalog(&self) -> Vec<CatalogEntry> {
        self.map
            .values()
            .map(|w| CatalogEntry {
                name: w.name().to_owned(),
                version: w.version(),
                min_version: w.min_version(),
                input_version: w.input_version(),
                input_type: w.input_type().map(str::to_owned),
            })
            .collect()
    }

    /// Why the registered workflows cannot be served as declared, if they cannot: a versioned
    /// type's name that runs cannot record, or one name declared by two types
    /// ([`Versioned::NAME`](super::Versioned::NAME)). A worker refuses to start with it.
    pub fn problem(&self) -> Option<String> {
        let all = self
            .map
            .values()
            .fold(super::Versions::new(), |all, w| all.and(&w.versions()));
        all.problem()
    }

    /// The run features the registered code knows beyond the engine's: every declared version
    /// of every versioned value type ([`Versions::features`](super::Versions::features)).
    pub fn value_features(&self) -> Vec<String> {
        let set: std::collections::BTreeSet<String> = self.map.values().flat_map(|w| w.versions().features()).collect();
        set.into_iter().collect()
    }
}
