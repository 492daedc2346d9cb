//! The suites that need the real RabbitMQ and Redis and stay within their own namespace:
//! worker, scheduler and client processes started, killed, paused and cut off, checked at a
//! provider outside the engine (README "Tests", tier `services`). Suites that disturb the
//! services every test shares (a broker restart, a Redis write pause) or read this process's
//! global metrics have a binary of their own, so nothing else runs beside them.

pub mod backlog;
pub mod children;
pub mod crash;
pub mod crash_parallel;
pub mod delivery;
pub mod doctor;
pub mod faults;
pub mod fleet_pause;
pub mod flow;
pub mod lifecycle;
pub mod lineage;
pub mod loadgen;
pub mod pause;
pub mod queues;
pub mod replay_gate;
pub mod scaling;
pub mod schedules;
pub mod security;
pub mod seed;
pub mod timeouts;
pub mod traces;
pub mod worker_smoke;
