//! `savepoint loadgen`: submits runs through the API (all at once, or at a fixed rate with a
//! cap on runs in flight), waits for them, and reports throughput, latency percentiles,
//! effect duplicates, Redis bytes per run and recovery stalls. Exits non-zero when a run is
//! lost or an effect is delivered twice.

mod args;
mod drive;
pub mod receiver;
mod stats;
mod track;

pub use args::LoadgenArgs;
pub use drive::{run, run_with_token};
pub use stats::{Percentiles, Report};
