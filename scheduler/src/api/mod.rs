//! The HTTP JSON API (axum), mounted next to `/metrics`, `/healthz` and `/readyz`.
//!
//! Every error is `{"error": "<message>"}` with a meaningful status (see [`ApiError`]);
//! request bodies go through [`extract::ApiJson`] so malformed JSON, a wrong content type and
//! oversized bodies are answered in the same shape.
//!
//! The routes are registered through [`utoipa_axum`] from the handlers' own `#[utoipa::path]`
//! annotations and typed bodies ([`model`]), so the OpenAPI document ([`openapi`], served at
//! `/openapi.json`, rendered at `/docs`, committed as `docs/openapi.json`) describes exactly
//! the routes that exist.

pub(crate) mod auth;
mod await_result;
pub(crate) mod body;
pub(crate) mod checks;
mod control;
pub(crate) mod doctor;
mod error;
mod extract;
mod fleet;
#[doc(hidden)]
pub mod fuzzing;
mod lineage;
mod model;
mod ops;
mod pause;
mod routes;
mod runs;
pub(crate) mod schedules;
pub(crate) mod spec;
mod state;
mod views;
mod waiting;

pub(crate) use error::ApiError;
pub use spec::openapi_json;

use routes::api_routes;
pub(crate) use routes::{Reply, ThreadParam};
pub(crate) use state::{ApiState, Services};
