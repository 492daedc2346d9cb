//! The route table, and what the handlers on it share: their answer type and the
//! `{thread_id}` path parameter.

use axum::http::StatusCode;

use super::{await_result, control, doctor, fleet, lineage, pause, runs, schedules, spec, ApiError, ApiState};

/// A handler's answer: a status with a typed JSON body, or an [`ApiError`].
pub(crate) type Reply<T> = Result<(StatusCode, axum::Json<T>), ApiError>;

/// The `{thread_id}` path parameter of every per-run operation.
#[derive(utoipa::IntoParams)]
#[into_params(parameter_in = Path)]
#[allow(dead_code)] // Read by the OpenAPI derive only: handlers take the raw text and validate it.
pub(crate) struct ThreadParam {
    /// The run's id: 1-128 characters of `A-Z a-z 0-9 _ - . :`.
    #[param(
        min_length = 1,
        max_length = 128,
        pattern = "^[A-Za-z0-9_.:-]{1,128}$",
        example = "invoice-INV-1"
    )]
    thread_id: String,
}

/// Every route of the API with its OpenAPI description: the one list both the router and
/// the document are built from.
pub(super) fn api_routes() -> utoipa_axum::router::OpenApiRouter<ApiState> {
    use utoipa_axum::routes;
    utoipa_axum::router::OpenApiRouter::with_openapi(<spec::ApiDoc as utoipa::OpenApi>::openapi())
        .routes(routes!(runs::start, runs::list))
        .routes(routes!(runs::get_run))
        .routes(routes!(runs::history))
        .routes(routes!(doctor::diagnosis))
        .routes(routes!(runs::export))
        .routes(routes!(await_result::await_result))
        .routes(routes!(control::resume))
        .routes(routes!(control::signal))
        .routes(routes!(control::cancel))
        .routes(routes!(control::retry))
        .routes(routes!(control::forget_feature))
        .routes(routes!(control::set_output_version))
        .routes(routes!(control::resolve))
        .routes(routes!(control::resolve_all))
        .routes(routes!(lineage::fork))
        .routes(routes!(lineage::restart))
        .routes(routes!(schedules::create, schedules::list))
        .routes(routes!(schedules::get, schedules::delete))
        .routes(routes!(schedules::pause))
        .routes(routes!(schedules::resume))
        .routes(routes!(schedules::trigger))
        .routes(routes!(pause::pause_run))
        .routes(routes!(pause::unpause_run))
        .routes(routes!(pause::pause, pause::list))
        .routes(routes!(pause::resume))
        .routes(routes!(fleet::workers))
        .routes(routes!(fleet::workflows))
}
