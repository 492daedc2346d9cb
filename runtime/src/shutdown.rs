//! Shutdown on the operating system's request: SIGTERM (a deploy, `kubectl delete`, `docker
//! stop`) or SIGINT (Ctrl-C). Not to be confused with a workflow's signals (`ctx.wait_signal`,
//! `POST /v1/runs/{thread_id}/signals/{name}`), which are values sent to a run.

use tokio_util::sync::CancellationToken;

/// Cancels `token` on SIGTERM or SIGINT (Ctrl-C). Where SIGTERM cannot be watched (not a Unix
/// system, or the handler cannot be installed), Ctrl-C alone still stops the process.
pub async fn on_terminate(token: CancellationToken) {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    biased;
                    _ = term.recv() => {}
                    _ = ctrl_c => {}
                }
            }
            Err(_) => {
                let _ = ctrl_c.await;
            }
        }
    }
    #[cfg(not(unix))]
    let _ = ctrl_c.await;
    tracing::info!("shutdown requested");
    token.cancel();
}
