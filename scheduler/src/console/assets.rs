//! The console's static files, compiled into the binary: its script, its style sheet and its
//! icon.

use axum::http::header;
use axum::response::{IntoResponse, Response};

/// `GET /ui/assets/console.js`: live refresh and the actions.
pub(super) async fn script() -> Response {
    (
        [(header::CONTENT_TYPE, "text/javascript; charset=utf-8")],
        include_str!("../../assets/console.js"),
    )
        .into_response()
}

/// `GET /ui/assets/favicon.svg`.
pub(super) async fn favicon() -> Response {
    (
        [(header::CONTENT_TYPE, "image/svg+xml")],
        include_str!("../../assets/favicon.svg"),
    )
        .into_response()
}

/// `GET /ui/assets/console.css`.
pub(super) async fn style() -> Response {
    (
        [(header::CONTENT_TYPE, "text/css; charset=utf-8")],
        include_str!("../../assets/console.css"),
    )
        .into_response()
}
