//! Every request body is read to its end before the request is routed, so that every early
//! answer (413 for a body over the limit, 415 for a wrong content type, 404, 405, and 401
//! once authentication exists) reaches the client.
//!
//! A server that answers and closes while the client is still sending makes the client's
//! next write fail: clients that send the whole body before they read (Python's urllib and
//! requests, most HTTP libraries) then see a connection reset instead of the answer. So a
//! body over the limit is still read, and thrown away, up to [`DRAIN_MAX`] bytes within
//! [`DRAIN_TIME`]; only past that is the connection closed early.

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::header::{CONNECTION, CONTENT_LENGTH};
use axum::http::HeaderValue;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use futures::StreamExt;
use std::time::Duration;

use super::extract::too_large;
use super::ApiError;

/// Most bytes of an oversized body read (and discarded) so that its 413 arrives.
const DRAIN_MAX: u64 = 64 * 1024 * 1024;

/// Longest time spent reading an oversized body.
const DRAIN_TIME: Duration = Duration::from_secs(30);

/// How reading a body ended.
enum Read {
    /// All of it, within the limit.
    Whole(Bytes),
    /// Over the limit: the rest was drained (or the drain gave up).
    TooLarge,
    /// The connection failed mid-body.
    Broken(String),
}

/// Reads `body` whole if it fits in `max` bytes; otherwise drains what is left.
async fn read(body: Body, declared: Option<u64>, max: usize) -> Read {
    let mut stream = body.into_data_stream();
    if declared.is_some_and(|n| n > max as u64) {
        drain(stream, 0).await;
        return Read::TooLarge;
    }
    let mut buf = Vec::with_capacity(declared.map_or(0, |n| n as usize));
    while let Some(chunk) = stream.next().await {
        match chunk {
            Ok(chunk) if buf.len() + chunk.len() > max => {
                drain(stream, (buf.len() + chunk.len()) as u64).await;
                return Read::TooLarge;
            }
            Ok(chunk) => buf.extend_from_slice(&chunk),
            Err(e) => return Read::Broken(e.to_string()),
        }
    }
    Read::Whole(Bytes::from(buf))
}

/// Reads and discards the rest of a body, up to [`DRAIN_MAX`] bytes in all and
/// [`DRAIN_TIME`].
async fn drain(mut stream: axum::body::BodyDataStream, mut seen: u64) {
    let rest = async {
        while seen <= DRAIN_MAX {
            match stream.next().await {
                Some(Ok(chunk)) => seen += chunk.len() as u64,
                _ => break,
            }
        }
    };
    let _ = tokio::time::timeout(DRAIN_TIME, rest).await;
}

/// The middleware: the handler gets the whole body; an oversized one is answered 413 once
/// read (with `Connection: close`: nothing more is read from this client).
pub(crate) async fn read_whole(State(max): State<usize>, req: Request, next: Next) -> Response {
    let (parts, body) = req.into_parts();
    let declared = parts
        .headers
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    match read(body, declared, max).await {
        Read::Whole(bytes) => next.run(Request::from_parts(parts, Body::from(bytes))).await,
        Read::TooLarge => {
            let mut resp = too_large(max).into_response();
            resp.headers_mut().insert(CONNECTION, HeaderValue::from_static("close"));
            resp
        }
        Read::Broken(e) => ApiError::bad_request(format!("cannot read the request body: {e}")).into_response(),
    }
}
