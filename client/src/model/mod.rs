//! The API's request and response bodies as types: the scheduler's handlers take and return
//! them, a client reads and writes them, and with the feature `openapi` they describe
//! themselves (`utoipa::ToSchema`): the OpenAPI document (`/openapi.json`,
//! `docs/openapi.json`) is generated from the same types, so the published contract cannot
//! drift from what the server sends.

mod doctor;
mod fleet;
mod numbers;
mod pause;
mod runs;
mod schedules;
mod shape;
mod waiting;

pub use doctor::*;
pub use fleet::*;
pub use numbers::{whole_u32, whole_u32_opt, whole_u64, whole_u64_opt};
pub use pause::*;
pub use runs::*;
pub use schedules::*;
pub use shape::object_opt;
pub use waiting::*;
