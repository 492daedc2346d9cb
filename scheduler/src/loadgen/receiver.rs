//! A webhook receiver for `webhook` runs: counts deliveries per `Idempotency-Key`, so the
//! load generator can say whether any key was delivered twice.

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use axum::Router;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use tokio_util::sync::CancellationToken;

/// Deliveries per idempotency key.
#[derive(Clone, Default)]
pub struct Deliveries(Arc<Mutex<HashMap<String, u32>>>);

impl Deliveries {
    /// A snapshot of the counts.
    pub fn snapshot(&self) -> HashMap<String, u32> {
        self.0.lock().map(|m| m.clone()).unwrap_or_default()
    }
}

async fn deliver(State(d): State<Deliveries>, headers: HeaderMap) -> StatusCode {
    let Some(key) = headers.get("idempotency-key").and_then(|v| v.to_str().ok()) else {
        return StatusCode::BAD_REQUEST;
    };
    if let Ok(mut m) = d.0.lock() {
        *m.entry(key.to_owned()).or_insert(0) += 1;
    }
    StatusCode::OK
}

/// Starts the receiver on 127.0.0.1 (a free port); returns its URL and the counts.
pub async fn start(stop: CancellationToken) -> std::io::Result<(String, Deliveries)> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}/hook", listener.local_addr()?);
    let d = Deliveries::default();
    let app = Router::new().route("/hook", post(deliver)).with_state(d.clone());
    tokio::spawn(async move {
        let _ = axum::serve(listener, app)
            .with_graceful_shutdown(async move { stop.cancelled().await })
            .await;
    });
    Ok((url, d))
}
