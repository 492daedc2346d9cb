//! The scheduler API's request parsing (`savepoint_scheduler::fuzzing::parse_request`): the
//! first byte picks the request (start, resume, signal, cancel, retry, resolve, list query,
//! result query, bare thread id), the rest is its path parameters (one per line) and body or
//! query. Parsing must never panic, and every refusal must be a 400: a 5xx here means a
//! client's bytes reached an internal error.
#![no_main]

use libfuzzer_sys::fuzz_target;
use savepoint_scheduler::fuzzing::parse_request;

fuzz_target!(|data: &[u8]| {
    let Some((&kind, input)) = data.split_first() else { return };
    if let Err(r) = parse_request(kind, input) {
        assert_eq!(r.status, 400, "a parse failure answered {}: {}", r.status, r.message);
    }
});
