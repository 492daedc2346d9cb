//! Process signals.

use tokio_util::sync::CancellationToken;

/// Cancels `token` on SIGTERM or SIGINT (Ctrl-C).
pub async fn on_terminate(token: CancellationToken) {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        let Ok(mut term) = signal(SignalKind::terminate()) else {
            return;
        };
        tokio::select! {
            biased;
            _ = term.recv() => {}
            _ = tokio::signal::ctrl_c() => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
    tracing::info!("termination requested");
    token.cancel();
}
