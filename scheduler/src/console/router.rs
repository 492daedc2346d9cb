//! The console's route table under `/ui`, and the state its handlers share.

use axum::routing::get;
use axum::Router;
use std::sync::Arc;

use super::assets::{favicon, script, style};
use super::attention::attention_page;
use super::fleet::{fleet_page, Samples};
use super::inbox::inbox_page;
use super::run::run_page;
use super::runs::runs_page;
use crate::api::ApiState;

/// State of the console's handlers.
#[derive(Clone)]
pub(crate) struct ConsoleState {
    pub(super) api: ApiState,
    pub(super) samples: Arc<Samples>,
}

/// The console's routes, under `/ui`.
pub(crate) fn routes(api: ApiState) -> Router {
    let samples = Arc::new(Samples::default());
    Router::new()
        .route("/ui", get(runs_page))
        .route("/ui/", get(runs_page))
        .route("/ui/runs/{thread_id}", get(run_page))
        .route("/ui/inbox", get(inbox_page))
        .route("/ui/attention", get(attention_page))
        .route("/ui/fleet", get(fleet_page))
        .route("/ui/assets/console.js", get(script))
        .route("/ui/assets/console.css", get(style))
        .route("/ui/assets/favicon.svg", get(favicon))
        .with_state(ConsoleState { api, samples })
}
