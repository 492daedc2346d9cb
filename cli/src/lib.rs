//! The `savepoint` command-line tool: a client of the scheduler's HTTP API ([`commands`]),
//! with the readable output of [`render`], plus the commands that run Savepoint themselves:
//! `savepoint dev` ([`dev`]: a scheduler and two workers, on the services or the embedded
//! backend), `savepoint loadgen` ([`loadgen`]: load and chaos driver, with the provider
//! [`loadgen::receiver`] the tests count effects at) and `savepoint sim` ([`sim`]: the
//! deterministic simulator). ARCHITECTURE §3 and §13b.
#![forbid(unsafe_code)]

pub mod commands;
pub mod dev;
pub mod loadgen;
pub mod render;
pub mod sim;

pub use commands::{execute, main, Cli, Command};
