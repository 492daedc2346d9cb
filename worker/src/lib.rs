//! The Savepoint worker runtime: consumes step tasks, claims runs, replays journals, runs
//! live steps with a fenced commit each, and finishes, suspends or yields (DESIGN §5).
//!
//! Users build their own worker binary: register workflows in a
//! [`savepoint::workflow::Registry`] and call [`run`].
#![forbid(unsafe_code)]

pub mod cli;
pub mod demo;
mod handle;
mod heartbeat;
pub mod replay;
mod runtime;
pub mod signals;
mod slice;
pub mod testing;

pub use runtime::{run, run_with, WorkerError, WorkerOptions};
