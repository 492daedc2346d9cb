//! The published API contract: `docs/openapi.json` is exactly what the code generates, and
//! the patterns it states for ids and names accept what the server accepts.

use serde_json::{json, Value};

/// The limit the committed copy states (the default `scheduler.max_input_bytes`).
fn default_limit() -> usize {
    savepoint_runtime::config::Config::default().scheduler.max_input_bytes
}

fn committed_path() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/openapi.json")
}

#[test]
fn the_committed_spec_is_what_the_code_generates() {
    let generated = savepoint_scheduler::openapi_json(default_limit());
    let committed = std::fs::read_to_string(committed_path()).unwrap_or_default();
    if committed != generated {
        let line = committed
            .lines()
            .zip(generated.lines())
            .position(|(a, b)| a != b)
            .unwrap_or_else(|| committed.lines().count().min(generated.lines().count()));
        panic!(
            "docs/openapi.json differs from what the code generates (first at line {}: committed {:?}, \
             generated {:?}); refresh it with `cargo run --bin savepoint -- openapi --max-body {} --out \
             docs/openapi.json` and commit it",
            line + 1,
            committed.lines().nth(line).unwrap_or("<end>"),
            generated.lines().nth(line).unwrap_or("<end>"),
            default_limit(),
        );
    }
}

fn spec() -> Value {
    serde_json::from_str(&savepoint_scheduler::openapi_json(default_limit())).expect("the document is JSON")
}

fn param_schema(spec: &Value, path: &str, name: &str) -> Value {
    let params = spec["paths"][path]["post"]["parameters"]
        .as_array()
        .or_else(|| spec["paths"][path]["get"]["parameters"].as_array())
        .unwrap_or_else(|| panic!("{path} has no parameters"));
    params
        .iter()
        .find(|p| p["name"] == name)
        .unwrap_or_else(|| panic!("{path} has no parameter {name}"))["schema"]
        .clone()
}

fn matches(schema: &Value, s: &str) -> bool {
    savepoint_scheduler::schema::validate(schema, &json!(s)).is_ok()
}

/// Samples at the edges of each rule: allowed characters, one past the length, others.
fn samples() -> Vec<String> {
    let mut v: Vec<String> = [
        "a",
        "invoice-1",
        "x.y:z_1",
        "A-Z",
        "has space",
        "",
        "tab\t",
        "brace{x}",
        "slash/x",
        "é",
        "ключ",
        "k:v",
        "semi;colon",
        "new\nline",
        "\u{7f}",
        "\u{85}",
        "ok.name-1_",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    for n in [63, 64, 65, 127, 128, 129, 255, 256, 257] {
        v.push("k".repeat(n));
    }
    v
}

#[test]
fn the_stated_patterns_accept_exactly_what_the_server_accepts() {
    let spec = spec();
    let thread = param_schema(&spec, "/v1/runs/{thread_id}", "thread_id");
    let signal = param_schema(&spec, "/v1/runs/{thread_id}/signals/{name}", "name");
    let key = param_schema(&spec, "/v1/runs/{thread_id}/effects/{key}/resolve", "key");
    for s in samples() {
        assert_eq!(
            matches(&thread, &s),
            savepoint_core::ids::ThreadId::new(s.clone()).is_ok(),
            "thread id {s:?}: spec {thread}"
        );
        let server_signal =
            (1..=64).contains(&s.len()) && s.bytes().all(|b| b.is_ascii_alphanumeric() || b"_.-".contains(&b));
        assert_eq!(matches(&signal, &s), server_signal, "signal name {s:?}");
        // Keys: the server counts bytes, the schema characters; they agree on ASCII.
        if s.is_ascii() {
            assert_eq!(
                matches(&key, &s),
                savepoint_core::ids::EffectKey::new(s.clone()).is_ok(),
                "effect key {s:?}: spec {key}"
            );
        }
    }
}

#[test]
fn every_operation_is_described_with_its_errors() {
    let spec = spec();
    assert_eq!(spec["openapi"], "3.1.0");
    let paths = spec["paths"].as_object().unwrap();
    let mut ops = Vec::new();
    for (path, item) in paths {
        for (method, op) in item.as_object().unwrap() {
            let id = op["operationId"]
                .as_str()
                .unwrap_or_else(|| panic!("{method} {path} has no operationId"));
            ops.push(id.to_owned());
            assert!(op["summary"].is_string(), "{id} has no summary");
            if path.starts_with("/v1/") {
                for code in ["400", "500", "503"] {
                    assert!(op["responses"][code].is_object(), "{id} does not list {code}");
                }
                if op.get("requestBody").is_some() {
                    assert!(op["responses"]["413"].is_object(), "{id} does not list 413");
                    assert!(op["responses"]["415"].is_object(), "{id} does not list 415");
                }
            }
        }
    }
    ops.sort();
    assert_eq!(
        ops,
        [
            "await_result",
            "cancel_run",
            "create_schedule",
            "delete_schedule",
            "diagnose_run",
            "export_run",
            "forget_feature",
            "fork_run",
            "get_history",
            "get_run",
            "get_schedule",
            "healthz",
            "list_pauses",
            "list_runs",
            "list_schedules",
            "list_workers",
            "list_workflows",
            "metrics",
            "pause",
            "pause_run",
            "pause_schedule",
            "readyz",
            "resolve_all_effects",
            "resolve_effect",
            "restart_run",
            "resume_pause",
            "resume_run",
            "resume_schedule",
            "retry_run",
            "send_signal",
            "set_output_version",
            "start_run",
            "trigger_schedule",
            "unpause_run",
        ]
    );
    // Links are written as OpenAPI spells them (utoipa 5.5 writes `operation_id`).
    let link = &spec["paths"]["/v1/runs"]["post"]["responses"]["201"]["links"]["GetRun"];
    assert_eq!(link["operationId"], "get_run", "{link}");
    assert!(spec["info"]["description"]
        .as_str()
        .unwrap()
        .contains(&format!("at most {} bytes", default_limit())));
}

/// Whether `body` is valid for the document's component schema `name` (its references resolved
/// in the document).
fn valid(spec: &Value, name: &str, body: Value) -> bool {
    let root = json!({"$ref": format!("#/components/schemas/{name}"), "components": spec["components"]});
    jsonschema::validator_for(&root).expect("a schema").is_valid(&body)
}

#[test]
fn the_rules_across_a_bodys_fields_are_in_the_document() {
    let spec = spec();
    // A flow names its key or where to find it, not both; and a limit, a rate or both.
    assert!(valid(&spec, "FlowBody", json!({"key": "c7", "limit": 2})));
    assert!(valid(
        &spec,
        "FlowBody",
        json!({"key_from": "/customer", "rate_per_sec": 5})
    ));
    assert!(valid(&spec, "FlowBody", json!({"limit": 1, "rate_per_sec": 2})));
    assert!(valid(
        &spec,
        "FlowBody",
        json!({"key": "c7", "key_from": null, "limit": 2})
    ));
    assert!(!valid(
        &spec,
        "FlowBody",
        json!({"key": "c7", "key_from": "/customer", "limit": 2})
    ));
    assert!(!valid(&spec, "FlowBody", json!({"key": "c7"})));
    assert!(!valid(&spec, "FlowBody", json!({"key": "c7", "limit": null})));
    // A schedule has exactly one of cron and every_secs.
    let schedule = |extra: Value| {
        let mut b = json!({"id": "nightly", "workflow": "report"});
        b.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
        b
    };
    assert!(valid(&spec, "ScheduleBody", schedule(json!({"cron": "0 3 * * *"}))));
    assert!(valid(&spec, "ScheduleBody", schedule(json!({"every_secs": 60}))));
    assert!(valid(
        &spec,
        "ScheduleBody",
        schedule(json!({"every_secs": 60, "cron": null}))
    ));
    assert!(!valid(
        &spec,
        "ScheduleBody",
        schedule(json!({"cron": "0 3 * * *", "every_secs": 60}))
    ));
    assert!(!valid(&spec, "ScheduleBody", schedule(json!({}))));
}
