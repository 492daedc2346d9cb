//! The API's request and response bodies: the client crate's model types
//! ([`savepoint_client::model`]), with their OpenAPI schemas (its feature `openapi`).

pub(crate) use savepoint_client::model::*;
