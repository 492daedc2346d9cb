//! What every page shares: rendering a template into a response, and the page shown instead
//! when one cannot be built.

use askama::Template;
use axum::http::StatusCode;
use axum::response::{Html, IntoResponse, Response};

use savepoint_store::StoreError;

use crate::api::ApiError;

/// A page that could not be built: shown as a page with the reason, never a blank one.
pub(super) struct PageError(StatusCode, String);

impl From<ApiError> for PageError {
    fn from(e: ApiError) -> Self {
        PageError(e.status, e.message)
    }
}

impl From<StoreError> for PageError {
    fn from(e: StoreError) -> Self {
        ApiError::from(e).into()
    }
}

#[derive(Template)]
#[template(path = "console/error.html")]
struct ErrorPage {
    active: &'static str,
    status: u16,
    message: String,
}

impl IntoResponse for PageError {
    fn into_response(self) -> Response {
        let page = ErrorPage {
            active: "",
            status: self.0.as_u16(),
            message: self.1,
        };
        (self.0, render(&page)).into_response()
    }
}

/// The template rendered as an HTML response (a plain 500 if rendering fails).
pub(super) fn render(t: &impl Template) -> Response {
    match t.render() {
        Ok(html) => Html(html).into_response(),
        Err(e) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("rendering the page failed: {e}"),
        )
            .into_response(),
    }
}

/// What a page's handler answers.
pub(super) type Page = Result<Response, PageError>;
