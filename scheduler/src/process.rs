//! The `savepoint-scheduler` process entry point (the binary is a one-line call to
//! [`main`]): args → config → telemetry → [`crate::run`] until SIGTERM/SIGINT.

use clap::Parser;
use savepoint_runtime::config::{Config, ProcessEnv};
use std::process::ExitCode;
use tokio_util::sync::CancellationToken;

/// Savepoint scheduler: HTTP API and due scanner.
#[derive(Debug, Parser)]
#[command(name = "savepoint-scheduler", version, about)]
struct Args {
    /// TOML config file (default: $SAVEPOINT_CONFIG, else built-in defaults).
    #[arg(long)]
    config: Option<String>,
    /// HTTP listen address (overrides config and SAVEPOINT_HTTP_ADDR).
    #[arg(long)]
    http_addr: Option<String>,
    /// Namespace of keys and queues (overrides config and SAVEPOINT_NAMESPACE).
    #[arg(long)]
    namespace: Option<String>,
}

fn load(args: Args) -> anyhow::Result<Config> {
    let mut cfg = Config::load(args.config.as_deref(), &ProcessEnv)?;
    if let Some(addr) = args.http_addr {
        cfg.scheduler.http_addr = addr;
    }
    if let Some(ns) = args.namespace {
        cfg.namespace = ns;
    }
    cfg.validate()?;
    Ok(cfg)
}

/// Runs the scheduler process; exit code 0 on a clean stop, 2 when a setting must be fixed
/// (the store or broker named what to do), 1 on any other failure.
pub async fn main() -> ExitCode {
    let cfg = match load(Args::parse()) {
        Ok(cfg) => cfg,
        Err(e) => {
            eprintln!("savepoint-scheduler: {e:#}");
            return ExitCode::FAILURE;
        }
    };
    let _telemetry = savepoint_runtime::telemetry::init(&cfg.log_format, "savepoint-scheduler");
    let shutdown = CancellationToken::new();
    tokio::spawn(savepoint_runtime::shutdown::on_terminate(shutdown.clone()));
    match crate::run(cfg, shutdown).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!(error = %e, "scheduler failed");
            eprintln!("savepoint-scheduler: {e}");
            if e.is_config() {
                ExitCode::from(2)
            } else {
                ExitCode::FAILURE
            }
        }
    }
}
