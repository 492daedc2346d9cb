//! The API's request parsing, reachable from outside the crate for the fuzz targets in
//! `fuzz/` (cargo-fuzz). Each request kind runs its bytes through the same parsers and
//! validators its handler uses before it touches the store: [`parse_object`] for JSON
//! bodies, axum's `Query` for query strings, the thread id, signal name and effect key
//! checks. A panic found here is one a client could cause. Not an API: hidden from the docs,
//! and nothing but the fuzz targets calls it.

use axum::extract::Query;
use axum::http::{StatusCode, Uri};
use savepoint_core::ids::{EffectKey, ThreadId};

use super::await_result::ResultQuery;
use super::control::valid_signal_name;
use super::extract::parse_object;
use super::extract::thread_id;
use super::model::{CancelBody, ResolveBody, StartRequest, ValueBody};
use super::runs::ListQuery;
use super::ApiError;

/// The request a fuzz input is parsed as (the first byte of the input, modulo the count).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RequestKind {
    /// `POST /v1/runs`: a [`StartRequest`] body; its thread id, or a generated one.
    Start,
    /// `POST /v1/runs/{thread_id}/resume`: a `ValueBody`.
    Resume,
    /// `POST /v1/runs/{thread_id}/signals/{name}`: a `ValueBody`.
    Signal,
    /// `POST /v1/runs/{thread_id}/cancel`: an optional `CancelBody` (blank or `null`: none).
    Cancel,
    /// `POST /v1/runs/{thread_id}/retry`: no body.
    Retry,
    /// `POST /v1/runs/{thread_id}/effects/{key}/resolve`: a `ResolveBody`.
    Resolve,
    /// `GET /v1/runs?<query>`: the list query.
    List,
    /// `GET /v1/runs/{thread_id}/result?<query>`: the long poll's query.
    Result,
    /// A bare thread id, as every per-run path carries it.
    ThreadId,
}

impl RequestKind {
    /// Every kind, in the order [`RequestKind::from_byte`] numbers them.
    pub const ALL: [RequestKind; 9] = [
        RequestKind::Start,
        RequestKind::Resume,
        RequestKind::Signal,
        RequestKind::Cancel,
        RequestKind::Retry,
        RequestKind::Resolve,
        RequestKind::List,
        RequestKind::Result,
        RequestKind::ThreadId,
    ];

    /// The kind a selector byte names (`b % 9`).
    pub fn from_byte(b: u8) -> Self {
        Self::ALL[usize::from(b) % Self::ALL.len()]
    }
}

/// A refused request: the status and message the API would answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejection {
    /// The HTTP status (400 for every parse or validation failure).
    pub status: u16,
    /// The `error` message.
    pub message: String,
}

impl From<ApiError> for Rejection {
    fn from(e: ApiError) -> Self {
        Self {
            status: e.status.as_u16(),
            message: e.message,
        }
    }
}

fn bad_request(message: impl std::fmt::Display) -> Rejection {
    ApiError::bad_request(message).into()
}

/// Splits off the path parameters: each is one line (up to `\n`) and must be UTF-8, as axum's
/// `Path` requires after percent-decoding; what follows the last one is the body or query.
fn split_params<const N: usize>(mut input: &[u8]) -> Result<([String; N], &[u8]), Rejection> {
    let mut params: [String; N] = std::array::from_fn(|_| String::new());
    for p in &mut params {
        let (line, rest) = match input.iter().position(|b| *b == b'\n') {
            Some(i) => (&input[..i], &input[i + 1..]),
            None => (input, &input[input.len()..]),
        };
        *p = String::from_utf8(line.to_vec()).map_err(|_| bad_request("invalid path: not UTF-8"))?;
        input = rest;
    }
    Ok((params, input))
}

/// Parses a query string with axum's `Query` (what `ApiQuery` does); a query that makes no
/// valid URI never reaches a handler (hyper answers 400).
fn parse_query<T: serde::de::DeserializeOwned>(path: &str, query: &[u8]) -> Result<T, Rejection> {
    let query = std::str::from_utf8(query).map_err(|_| bad_request("invalid URI: not UTF-8"))?;
    let uri: Uri = format!("{path}?{query}")
        .parse()
        .map_err(|e| bad_request(format!("invalid URI: {e}")))?;
    Query::<T>::try_from_uri(&uri)
        .map(|Query(q)| q)
        .map_err(|e| bad_request(format!("invalid query: {}", e.body_text())))
}

/// Parses `input` as the request [`RequestKind::from_byte`]`(kind)` names, the way its
/// handler does before it reads or writes the store. Path parameters come first, one per
/// line (thread id; then the signal name or effect key), then the body or query.
///
/// `Ok` when the API would go on to serve the request; a [`Rejection`] (always 400) when it
/// would refuse it. A generated thread id that fails validation answers 500: a bug.
pub fn parse_request(kind: u8, input: &[u8]) -> Result<(), Rejection> {
    match RequestKind::from_byte(kind) {
        RequestKind::Start => {
            let req: StartRequest = parse_object(input)?;
            let thread = match req.thread_id {
                Some(raw) => thread_id(raw)?,
                None => {
                    let generated = ThreadId::generate(&req.workflow);
                    // The handler trusts a generated id: it must pass its own validation.
                    ThreadId::new(generated.as_str()).map_err(|e| Rejection {
                        status: StatusCode::INTERNAL_SERVER_ERROR.as_u16(),
                        message: format!("generated thread id is invalid: {e}"),
                    })?
                }
            };
            // The handler measures the input as JSON text against the body limit.
            let _ = (thread, req.input.to_string().len());
        }
        RequestKind::Resume => {
            let ([raw], body) = split_params::<1>(input)?;
            thread_id(raw)?;
            let _: ValueBody = parse_object(body)?;
        }
        RequestKind::Signal => {
            let ([raw, name], body) = split_params::<2>(input)?;
            thread_id(raw)?;
            if !valid_signal_name(&name) {
                return Err(bad_request(format!("invalid signal name {name:?}")));
            }
            let _: ValueBody = parse_object(body)?;
        }
        RequestKind::Cancel => {
            let ([raw], body) = split_params::<1>(input)?;
            thread_id(raw)?;
            // As the handler: no body, or `null`, is no reason.
            let blank = body.iter().all(u8::is_ascii_whitespace);
            if !(blank || body.trim_ascii() == b"null") {
                let _: CancelBody = parse_object(body)?;
            }
        }
        RequestKind::Retry => {
            let ([raw], _) = split_params::<1>(input)?;
            thread_id(raw)?;
        }
        RequestKind::Resolve => {
            let ([raw, key], body) = split_params::<2>(input)?;
            thread_id(raw)?;
            EffectKey::new(key).map_err(bad_request)?;
            let _: ResolveBody = parse_object(body)?;
        }
        RequestKind::List => {
            let _: ListQuery = parse_query("/v1/runs", input)?;
        }
        RequestKind::Result => {
            let ([raw], query) = split_params::<1>(input)?;
            thread_id(raw)?;
            let _: ResultQuery = parse_query("/v1/runs/t/result", query)?;
        }
        RequestKind::ThreadId => {
            let raw = String::from_utf8(input.to_vec()).map_err(|_| bad_request("invalid path: not UTF-8"))?;
            thread_id(raw)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kind(k: RequestKind) -> u8 {
        RequestKind::ALL.iter().position(|x| *x == k).unwrap() as u8
    }

    #[test]
    fn valid_requests_parse() {
        let ok: [(RequestKind, &[u8]); 10] = [
            (
                RequestKind::Start,
                br#"{"workflow":"approval","input":{"amount_cents":1200}}"#,
            ),
            (
                RequestKind::Start,
                br#"{"workflow":"approval","thread_id":"approval-1"}"#,
            ),
            (
                RequestKind::Resume,
                b"t-1\n{\"value\":{\"approved\":true},\"id\":\"c-1\"}",
            ),
            (RequestKind::Signal, b"t-1\napprove\n{\"value\":1}"),
            (RequestKind::Cancel, b"t-1\n"),
            (RequestKind::Cancel, b"t-1\n{\"reason\":\"no longer needed\"}"),
            (RequestKind::Retry, b"t-1"),
            (RequestKind::Resolve, b"t-1\nledger:42\n{\"applied\":true,\"result\":7}"),
            (RequestKind::List, b"status=waiting&limit=10"),
            (RequestKind::Result, b"t-1\ntimeout=1.5"),
        ];
        for (k, input) in ok {
            assert_eq!(
                parse_request(kind(k), input),
                Ok(()),
                "{k:?} {:?}",
                String::from_utf8_lossy(input)
            );
        }
    }

    #[test]
    fn bad_requests_are_400() {
        let bad: [(RequestKind, &[u8]); 7] = [
            (RequestKind::Start, b"[\"approval\"]"),
            (RequestKind::Start, br#"{"workflow":"a","thread_id":"no spaces"}"#),
            (RequestKind::Resume, b"t-1\n{\"value\":1,\"extra\":2}"),
            (RequestKind::Signal, b"t-1\nhas space\n{}"),
            (RequestKind::Resolve, b"t-1\nkey\n{}"),
            (RequestKind::ThreadId, b"\xff"),
            (RequestKind::List, b"limit=1&limit=2"),
        ];
        for (k, input) in bad {
            let e = parse_request(kind(k), input).unwrap_err();
            assert_eq!(e.status, 400, "{k:?}: {e:?}");
        }
    }
}
