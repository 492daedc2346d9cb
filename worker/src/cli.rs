//! The worker command line: what [`crate::main`] runs (the `savepoint-worker` binary and
//! every worker of your own).

use clap::Parser;
use tokio_util::sync::CancellationToken;

use savepoint_runtime::config::{Config, ProcessEnv};
use savepoint_store::{ScriptStore, StoreError};

use crate::Setup;

/// A Savepoint worker: runs the workflows it registers, taking their step tasks from
/// RabbitMQ and checkpointing every call in Redis.
#[derive(Parser, Debug)]
#[command(version, about)]
struct Args {
    /// TOML config file (also SAVEPOINT_CONFIG).
    #[arg(long)]
    config: Option<String>,
    /// Namespace (overrides config and SAVEPOINT_NAMESPACE).
    #[arg(long)]
    namespace: Option<String>,
    /// Runs executed at once (overrides config).
    #[arg(long)]
    concurrency: Option<usize>,
    /// Health/metrics listener, e.g. 127.0.0.1:7071; empty to disable.
    #[arg(long)]
    http_addr: Option<String>,
    #[command(subcommand)]
    command: Option<Command>,
}

/// What to do instead of running a worker.
#[derive(clap::Subcommand, Debug)]
enum Command {
    /// The deploy gate: replay every live run of the namespace against the workflows this
    /// build registers, read-only, and say which would block (exit 1) with the fix; exit 0
    /// when every run replays cleanly.
    ReplayCheck {
        /// Only runs of this workflow.
        #[arg(long)]
        workflow: Option<String>,
        /// At most this many runs of each live status (the newest).
        #[arg(long, default_value_t = 100_000)]
        limit: usize,
    },
}

/// Parses arguments, loads the config, starts logging and runs a worker with the workflows
/// `make` registers (given the [`Setup`]: the loaded configuration) until SIGTERM/SIGINT.
/// Exit code 0 on a clean stop, 2 on bad config, 1 on failure.
pub async fn main_with<F>(make: F) -> std::process::ExitCode
where
    F: FnOnce(&Setup) -> anyhow::Result<savepoint::workflow::Registry>,
{
    let mut cmd = <Args as clap::CommandFactory>::command();
    // (A user's worker binary shows its own name in --help and errors.)
    if let Some(name) = std::env::args().next().as_deref().and_then(binary_name) {
        cmd = cmd.bin_name(name);
    }
    let args = match cmd
        .try_get_matches()
        .and_then(|m| <Args as clap::FromArgMatches>::from_arg_matches(&m))
    {
        Ok(a) => a,
        Err(e) => e.exit(),
    };
    let mut cfg = match Config::load(args.config.as_deref(), &ProcessEnv) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("savepoint-worker: {e:#}");
            return std::process::ExitCode::from(2);
        }
    };
    if let Some(ns) = args.namespace {
        cfg.namespace = ns;
    }
    if let Some(c) = args.concurrency {
        cfg.worker.concurrency = c;
    }
    if let Some(a) = args.http_addr {
        cfg.worker.http_addr = a;
    }
    if let Err(e) = cfg.validate() {
        eprintln!("savepoint-worker: {e}");
        return std::process::ExitCode::from(2);
    }
    let _telemetry = savepoint_runtime::telemetry::init(&cfg.log_format, "savepoint-worker");
    let shutdown = CancellationToken::new();
    tokio::spawn(savepoint_runtime::shutdown::on_terminate(shutdown.clone()));
    // Redis not up yet means waiting (with back-off, until SIGTERM); a URL that points at the
    // wrong kind of server or carries the wrong password is named at once (exit 2).
    let connect = || ScriptStore::connect(&cfg.redis_url, cfg.keys(), cfg.store());
    let store = match savepoint_store::until_ok("connecting to the store", None, &shutdown, connect).await {
        Ok(s) => s,
        Err(e) => {
            eprintln!("savepoint-worker: redis: {e}");
            return match e {
                StoreError::Misconfigured(_) => std::process::ExitCode::from(2),
                _ => std::process::ExitCode::FAILURE,
            };
        }
    };
    let registry = match make(&Setup::new(cfg.clone(), store)) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("savepoint-worker: {e:#}");
            return std::process::ExitCode::from(2);
        }
    };
    if let Some(Command::ReplayCheck { workflow, limit }) = args.command {
        let opts = crate::replay_check::CheckOptions {
            workflow,
            per_status: limit,
        };
        return replay_check(&cfg, &registry, &opts).await;
    }
    match crate::run(cfg, registry, shutdown).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("savepoint-worker: {e}");
            if e.is_config() {
                std::process::ExitCode::from(2)
            } else {
                std::process::ExitCode::FAILURE
            }
        }
    }
}

/// `replay-check`: the report on stdout; exit 1 when a run would block, 0 otherwise.
async fn replay_check(
    cfg: &Config,
    registry: &savepoint::workflow::Registry,
    opts: &crate::replay_check::CheckOptions,
) -> std::process::ExitCode {
    let store = match ScriptStore::connect(&cfg.redis_url, cfg.keys(), cfg.store()).await {
        Ok(s) => s,
        Err(e) => {
            eprintln!("savepoint-worker: redis: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    match crate::replay_check::replay_check(&store, registry, opts).await {
        Ok(report) => {
            print!("{}", report.render());
            if report.blocks() {
                std::process::ExitCode::FAILURE
            } else {
                std::process::ExitCode::SUCCESS
            }
        }
        Err(e) => {
            eprintln!("savepoint-worker: replay-check: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// The file name of the running binary.
fn binary_name(argv0: &str) -> Option<String> {
    std::path::Path::new(argv0)
        .file_name()
        .and_then(|n| n.to_str())
        .map(str::to_owned)
}
