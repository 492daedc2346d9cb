//! A webhook receiver for `webhook` runs, standing in for a provider: it counts deliveries
//! per `Idempotency-Key`, so the load generator (and the tests) can say whether any key was
//! applied twice, and it can be made slow and can check fencing tokens.
//!
//! Fencing: a request carries `Fencing-Token: <n>`. With token checking on, the receiver
//! remembers the highest token seen per key (on arrival) and refuses, with 409, a request
//! whose token is lower — at arrival and again when it would apply it (after the delay), so
//! a stale worker's slow request that a newer attempt overtook is not applied. A request
//! whose client went away before the delay ended is not applied either (the handler is
//! dropped with the connection), like a provider that commits only what it answers.

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use axum::Router;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// How the receiver behaves.
#[derive(Debug, Clone, Default)]
pub struct ReceiverOptions {
    /// Time each request takes before it is applied and answered.
    pub delay: Duration,
    /// Refuse requests whose `Fencing-Token` is lower than the highest seen for their key.
    pub check_tokens: bool,
}

#[derive(Default)]
struct Inner {
    applied: HashMap<String, u32>,
    /// Highest token seen per key.
    tokens: HashMap<String, u64>,
    /// (key, token) of every applied request, in order.
    log: Vec<(String, Option<u64>)>,
    /// Requests received (applied or not).
    received: u64,
    /// Requests refused as stale.
    refused: u64,
    /// Requests being processed now.
    in_flight: u64,
    /// Requests whose client went away before they were applied.
    dropped: u64,
}

/// Deliveries per idempotency key, and what the receiver saw.
#[derive(Clone, Default)]
pub struct Deliveries(Arc<Mutex<Inner>>);

impl Deliveries {
    fn with<T>(&self, f: impl FnOnce(&mut Inner) -> T) -> T {
        let mut g = self.0.lock().unwrap_or_else(|p| p.into_inner());
        f(&mut g)
    }

    /// A snapshot of the counts of applied requests per key.
    pub fn snapshot(&self) -> HashMap<String, u32> {
        self.with(|i| i.applied.clone())
    }

    /// Every applied request as (key, fencing token), in order.
    pub fn applied_log(&self) -> Vec<(String, Option<u64>)> {
        self.with(|i| i.log.clone())
    }

    /// Requests received so far (including ones not applied).
    pub fn received(&self) -> u64 {
        self.with(|i| i.received)
    }

    /// Requests refused for a stale fencing token.
    pub fn refused(&self) -> u64 {
        self.with(|i| i.refused)
    }

    /// Requests being processed right now.
    pub fn in_flight(&self) -> u64 {
        self.with(|i| i.in_flight)
    }

    /// Requests abandoned by their client before they were applied (not applied).
    pub fn dropped(&self) -> u64 {
        self.with(|i| i.dropped)
    }
}

/// Counts a request in flight; on drop before `done`, the client went away.
struct InFlight {
    d: Deliveries,
    done: bool,
}

impl Drop for InFlight {
    fn drop(&mut self) {
        let done = self.done;
        self.d.with(|i| {
            i.in_flight -= 1;
            if !done {
                i.dropped += 1;
            }
        });
    }
}

#[derive(Clone)]
struct App {
    d: Deliveries,
    opts: ReceiverOptions,
}

async fn deliver(State(app): State<App>, headers: HeaderMap) -> StatusCode {
    let Some(key) = headers.get("idempotency-key").and_then(|v| v.to_str().ok()) else {
        return StatusCode::BAD_REQUEST;
    };
    let key = key.to_owned();
    let token: Option<u64> = headers
        .get("fencing-token")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok());
    let check = app.opts.check_tokens;
    let stale = |i: &mut Inner| match token {
        Some(t) if check => i.tokens.get(&key).is_some_and(|max| t < *max),
        _ => false,
    };
    let refused = app.d.with(|i| {
        i.received += 1;
        if stale(i) {
            i.refused += 1;
            return true;
        }
        if let Some(t) = token {
            let max = i.tokens.entry(key.clone()).or_insert(t);
            *max = (*max).max(t);
        }
        false
    });
    if refused {
        return StatusCode::CONFLICT;
    }
    app.d.with(|i| i.in_flight += 1);
    let mut guard = InFlight {
        d: app.d.clone(),
        done: false,
    };
    if !app.opts.delay.is_zero() {
        tokio::time::sleep(app.opts.delay).await;
    }
    guard.done = true;
    app.d.with(|i| {
        if stale(i) {
            i.refused += 1;
            return StatusCode::CONFLICT;
        }
        *i.applied.entry(key.clone()).or_insert(0) += 1;
        i.log.push((key.clone(), token));
        StatusCode::OK
    })
}

/// Starts the receiver on 127.0.0.1 (a free port); returns its URL and the counts.
pub async fn start(stop: CancellationToken) -> std::io::Result<(String, Deliveries)> {
    start_with(stop, ReceiverOptions::default()).await
}

/// [`start`] with options (a delay per request, fencing-token checks).
pub async fn start_with(stop: CancellationToken, opts: ReceiverOptions) -> std::io::Result<(String, Deliveries)> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}/hook", listener.local_addr()?);
    let d = Deliveries::default();
    let app = Router::new()
        .route("/hook", post(deliver))
        .with_state(App { d: d.clone(), opts });
    tokio::spawn(async move {
        let _ = axum::serve(listener, app)
            .with_graceful_shutdown(async move { stop.cancelled().await })
            .await;
    });
    Ok((url, d))
}
