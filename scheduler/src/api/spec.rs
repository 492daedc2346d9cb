//! The OpenAPI 3.1 document of the API, generated from the handlers' annotations and typed
//! bodies ([`super::model`]) by utoipa, then finished here with what every operation shares
//! (the error responses each can give, and this server's body size limit).
//!
//! Served at `GET /openapi.json` and rendered at `/docs` (Swagger UI, its assets embedded in
//! the binary); `docs/openapi.json` is the committed copy for the default configuration, and
//! a test fails when it differs from what the code generates (`savepoint openapi` rewrites
//! it).

use axum::Router;
use savepoint_runtime::ops::Readiness;
use serde_json::Value;
use utoipa::openapi::content::ContentBuilder;
use utoipa::openapi::response::ResponseBuilder;
use utoipa::openapi::{OpenApi, Ref, RefOr};

use super::model::ErrorBody;
use super::ApiState;

#[derive(utoipa::OpenApi)]
#[openapi(
    info(
        title = "Savepoint API",
        description = "Start, inspect and steer durable workflow runs. Every error body is \
            `{\"error\": \"<message>\"}`; request bodies are JSON (`Content-Type: application/json`).",
        license(name = "Apache-2.0"),
    ),
    tags(
        (name = "runs", description = "Start runs, read them, await their result"),
        (name = "control", description = "Answer, signal, cancel, retry and settle runs; fork and restart them"),
        (name = "schedules", description = "Start runs on a cron pattern or a fixed interval"),
        (name = "pause", description = "Pause and resume a run, a workflow, a version, a task queue or the runs a filter matches"),
        (name = "fleet", description = "The live workers and the workflows they serve"),
        (name = "ops", description = "Probes and metrics"),
    ),
    components(schemas(ErrorBody)),
)]
pub(super) struct ApiDoc;

/// The shared error responses: (component name, status, description).
const ERRORS: [(&str, &str, &str); 9] = [
    (
        "BadRequest",
        "400",
        "A malformed path, query or body (the message says which part and why)",
    ),
    (
        "Unauthorized",
        "401",
        "API tokens are configured and the request has none, or not a valid one",
    ),
    (
        "Forbidden",
        "403",
        "The token's role may not do this (read < operate < admin)",
    ),
    (
        "TooManyRequests",
        "429",
        "The token's rate limit is reached (`Retry-After` says when to retry), or the run holds as \
         many unconsumed signals as it may",
    ),
    ("RunNotFound", "404", "No run has this thread id"),
    ("PayloadTooLarge", "413", "The request body exceeds the limit"),
    (
        "UnsupportedMediaType",
        "415",
        "The body is not `Content-Type: application/json`",
    ),
    ("InternalError", "500", "The checkpoint store answered with an error"),
    (
        "Unavailable",
        "503",
        "The scheduler is still connecting, or Redis is unavailable: retry later",
    ),
];

/// The routers and the finished document (as JSON), built from the same route lists.
pub(crate) fn parts(max_body: usize) -> (Router<ApiState>, Router<Readiness>, Value) {
    let (api, mut doc) = super::api_routes().split_for_parts();
    let (ops, ops_doc) = super::ops::routes().split_for_parts();
    doc.merge(ops_doc);
    (api, ops, to_json(&finish(doc, max_body)))
}

/// A field that is present and not `null` (a body's `Option` fields may be sent as `null`,
/// which the server reads as absent).
fn given(fields: &[&str]) -> Value {
    let props: serde_json::Map<String, Value> = fields
        .iter()
        .map(|f| ((*f).to_owned(), serde_json::json!({"not": {"type": "null"}})))
        .collect();
    serde_json::json!({"required": fields, "properties": props})
}

/// The rules the server enforces across a body's fields, stated in the document so a request
/// the schema accepts is one the server accepts (utoipa has no attribute for them): a flow
/// names its key or where to find it, not both, and a limit or a rate; a schedule has exactly
/// one of `cron` and `every_secs`.
fn body_rules(v: &mut Value) {
    let Some(schemas) = v.pointer_mut("/components/schemas").and_then(Value::as_object_mut) else {
        return;
    };
    if let Some(flow) = schemas.get_mut("FlowBody").and_then(Value::as_object_mut) {
        flow.insert("not".into(), given(&["key", "key_from"]));
        flow.insert(
            "anyOf".into(),
            Value::Array(vec![given(&["limit"]), given(&["rate_per_sec"])]),
        );
    }
    // A pause or resume names exactly one of a workflow, a queue and a filter; a version (and
    // a resume's target version) goes with a workflow.
    for (name, with_workflow) in [
        ("PauseRequest", &["version"][..]),
        ("ResumeRequest", &["version", "to_version"][..]),
    ] {
        if let Some(body) = schemas.get_mut(name).and_then(Value::as_object_mut) {
            let one = [given(&["workflow"]), given(&["queue"]), given(&["filter"])];
            let mut all = vec![serde_json::json!({"oneOf": one})];
            for f in with_workflow {
                all.push(serde_json::json!({"anyOf": [{"not": given(&[f])}, given(&["workflow"])]}));
            }
            body.insert("allOf".into(), Value::Array(all));
        }
    }
    if let Some(schedule) = schemas.get_mut("ScheduleBody").and_then(Value::as_object_mut) {
        schedule.insert(
            "oneOf".into(),
            Value::Array(vec![given(&["cron"]), given(&["every_secs"])]),
        );
    }
}

/// The document as JSON. utoipa 5.5 writes a response link's fields in snake case
/// (`operation_id`); OpenAPI spells them in camel case (`operationId`), and tools that follow
/// links (schemathesis' stateful phase, client generators) ignore the snake-case ones.
fn to_json(doc: &OpenApi) -> Value {
    let mut v = serde_json::to_value(doc).unwrap_or_default();
    body_rules(&mut v);
    if let Some(paths) = v.get_mut("paths").and_then(Value::as_object_mut) {
        let responses = paths
            .values_mut()
            .filter_map(Value::as_object_mut)
            .flat_map(|item| item.values_mut())
            .filter_map(|op| op.get_mut("responses").and_then(Value::as_object_mut))
            .flat_map(|r| r.values_mut());
        for links in responses.filter_map(|r| r.get_mut("links").and_then(Value::as_object_mut)) {
            for link in links.values_mut().filter_map(Value::as_object_mut) {
                for (snake, camel) in [
                    ("operation_id", "operationId"),
                    ("operation_ref", "operationRef"),
                    ("request_body", "requestBody"),
                ] {
                    if let Some(x) = link.remove(snake) {
                        link.insert(camel.to_owned(), x);
                    }
                }
            }
        }
    }
    v
}

/// Adds the shared error responses to each operation that can give them, and states the
/// body size limit.
fn finish(mut doc: OpenApi, max_body: usize) -> OpenApi {
    let components = doc.components.get_or_insert_with(Default::default);
    components.add_security_scheme(
        "bearerAuth",
        utoipa::openapi::security::SecurityScheme::Http(
            utoipa::openapi::security::HttpBuilder::new()
                .scheme(utoipa::openapi::security::HttpAuthScheme::Bearer)
                .description(Some(
                    "An API token (`savepoint token new`), required when the scheduler is configured with \
                     tokens (README \"Security\"); a deployment without tokens serves loopback only.",
                ))
                .build(),
        ),
    );
    for (name, status, description) in ERRORS {
        let description = if status == "413" {
            format!("{description} of {max_body} bytes (`scheduler.max_input_bytes`)")
        } else {
            description.to_owned()
        };
        let content = ContentBuilder::new()
            .schema(Some(Ref::from_schema_name("ErrorBody")))
            .build();
        let response = ResponseBuilder::new()
            .description(description)
            .content("application/json", content)
            .build();
        components.responses.insert(name.to_owned(), RefOr::T(response));
    }
    if let Some(info) = doc.info.description.as_mut() {
        info.push_str(&format!(
            " A request body may be at most {max_body} bytes (`scheduler.max_input_bytes`, \
             `SAVEPOINT_MAX_INPUT_BYTES`); a larger one is read to its end (up to 64 MiB) and \
             answered 413."
        ));
    }
    for (path, item) in doc.paths.paths.iter_mut() {
        if !path.starts_with("/v1/") {
            continue;
        }
        let per_run = path.contains("{thread_id}");
        for op in [item.get.as_mut(), item.post.as_mut(), item.delete.as_mut()]
            .into_iter()
            .flatten()
        {
            // A bearer token when tokens are configured; none on an open (loopback) API.
            op.security = Some(vec![
                utoipa::openapi::security::SecurityRequirement::new("bearerAuth", Vec::<String>::new()),
                utoipa::openapi::security::SecurityRequirement::default(),
            ]);
            let with_body = op.request_body.is_some();
            for (name, status, _) in ERRORS {
                let applies = match status {
                    "404" => per_run,
                    "413" | "415" => with_body,
                    _ => true,
                };
                if applies {
                    op.responses
                        .responses
                        .entry(status.to_owned())
                        .or_insert_with(|| RefOr::Ref(Ref::from_response_name(name)));
                }
            }
        }
    }
    doc
}

/// The document as pretty JSON (what `/openapi.json` serves and `docs/openapi.json` holds
/// for the default limit).
pub fn openapi_json(max_body: usize) -> String {
    let doc = parts(max_body).2;
    let mut text = serde_json::to_string_pretty(&doc).unwrap_or_default();
    text.push('\n');
    text
}

/// `GET /openapi.json` and the reference page at `/docs`.
pub(crate) fn docs_router(doc: Value) -> Router {
    utoipa_swagger_ui::SwaggerUi::new("/docs")
        .external_url_unchecked("/openapi.json", doc)
        .into()
}
