//! The actions the doctor offers: each as the `savepoint` command and the API call it makes.

use serde_json::{json, Value};

use super::Action;

/// The shell-quoted form of an argument (single quotes unless it is plain).
pub(super) fn sh(arg: &str) -> String {
    if !arg.is_empty() && arg.chars().all(|c| c.is_ascii_alphanumeric() || "_-.:/@".contains(c)) {
        arg.to_owned()
    } else {
        format!("'{}'", arg.replace('\'', r"'\''"))
    }
}

/// The API path of a run's sub-resource (`/v1/runs/{thread}/{tail}`).
pub(super) fn run_path(thread: &str, tail: &str) -> String {
    format!("/v1/runs/{}/{tail}", savepoint_client::fmt::encode(thread))
}

/// An action that is one API call (not a dangerous one).
pub(super) fn api_action(label: String, command: String, method: &str, path: String, body: Option<Value>) -> Action {
    Action {
        label,
        command,
        method: Some(method.into()),
        path: Some(path),
        body,
        dangerous: false,
    }
}

/// Cancelling the run (dangerous: effects it began stay in doubt).
pub(super) fn cancel_action(thread: &str) -> Action {
    Action {
        dangerous: true,
        ..api_action(
            "Cancel the run: it ends as cancelled and runs nothing more (effects it began stay in doubt \
             for the operator)"
                .into(),
            format!("savepoint cancel {} --reason '…'", sh(thread)),
            "POST",
            run_path(thread, "cancel"),
            Some(json!({"reason": "<text>"})),
        )
    }
}

/// Retrying a blocked run, described by `label`.
pub(super) fn retry_action(thread: &str, label: &str) -> Action {
    api_action(
        label.to_owned(),
        format!("savepoint retry {}", sh(thread)),
        "POST",
        run_path(thread, "retry"),
        None,
    )
}

/// Pausing a live run, with a note (confirmed first: the run stops at its next call).
pub(crate) fn pause_action(thread: &str) -> Action {
    Action {
        dangerous: true,
        ..api_action(
            "Pause the run: it finishes the call under way and takes no new slice until unpaused".into(),
            format!("savepoint pause {} --note '…'", sh(thread)),
            "POST",
            run_path(thread, "pause"),
            Some(json!({"note": "<text>"})),
        )
    }
}

/// Lifting the pause that stopped a run: its own (`field` `run`) or a workflow's, version's or
/// queue's.
pub(crate) fn unpause_action(thread: &str, field: &str) -> Action {
    let scoped = |label: String, flags: String, body: Value| {
        api_action(
            label,
            format!("savepoint unpause {flags}"),
            "POST",
            "/v1/pauses/resume".into(),
            Some(body),
        )
    };
    use savepoint_store::PauseScope;
    match PauseScope::parse_field(field) {
        Some(PauseScope::Workflow(w)) => scoped(
            format!("Resume workflow {w}: every run its pause stopped goes on"),
            format!("--workflow {}", sh(&w)),
            json!({"workflow": w}),
        ),
        Some(PauseScope::Version(w, v)) => scoped(
            format!("Resume workflow {w} v{v}: every run its pause stopped goes on"),
            format!("--workflow {} --version {v}", sh(&w)),
            json!({"workflow": w, "version": v}),
        ),
        Some(PauseScope::Queue { name, .. }) => scoped(
            format!("Resume queue {name}: every run its pause stopped goes on"),
            format!("--queue {}", sh(&name)),
            json!({"queue": name}),
        ),
        None => api_action(
            "Unpause the run: it goes on where the pause stopped it".into(),
            format!("savepoint unpause {}", sh(thread)),
            "POST",
            run_path(thread, "unpause"),
            None,
        ),
    }
}

/// An action outside the API (a deploy): a label only.
pub(super) fn deploy_action(label: String) -> Action {
    Action {
        label,
        command: String::new(),
        method: None,
        path: None,
        body: None,
        dangerous: false,
    }
}

/// Answering the interrupt `name` of a waiting run.
pub(super) fn resume_action(thread: &str, name: &str) -> Action {
    api_action(
        format!("Answer the interrupt {name:?} (the value is checked against its schema)"),
        format!("savepoint resume {} '<json>'", sh(thread)),
        "POST",
        run_path(thread, "resume"),
        Some(json!({"value": "<json>"})),
    )
}

/// Sending the signal `name` a waiting run waits for.
pub(super) fn signal_action(thread: &str, name: &str) -> Action {
    api_action(
        format!("Send the signal {name:?}"),
        format!("savepoint signal {} {} '<json>'", sh(thread), sh(name)),
        "POST",
        run_path(thread, &format!("signals/{name}")),
        Some(json!({"value": "<json>"})),
    )
}

/// The two ways to resolve the in-doubt effect `key`: it happened (applied, with its result),
/// or it did not (released, performed once). Both dangerous.
/// Settling every effect a run has in doubt together (`keys`), each applied with its result
/// or not applied (dangerous: only the provider knows).
pub(super) fn resolve_all_action(thread: &str, keys: &[String]) -> Action {
    let shape: Vec<String> = keys
        .iter()
        .map(|k| {
            format!(
                "{}: {{\"applied\": true, \"result\": <json>}} | {{\"applied\": false}}",
                json!(k)
            )
        })
        .collect();
    Action {
        dangerous: true,
        ..api_action(
            format!(
                "Check each of the {} effects in doubt ({}) at its provider and settle them together: applied \
                 (with its result: the run goes on without performing it) or not applied (the run performs it, \
                 once); the run then goes on",
                keys.len(),
                keys.join(", ")
            ),
            format!("savepoint resolve {} --all '{{{}}}'", sh(thread), shape.join(", ")),
            "POST",
            format!("/v1/runs/{}/effects/resolve", savepoint_client::fmt::encode(thread)),
            Some(json!({"effects": "<json>"})),
        )
    }
}

pub(super) fn resolve_actions(thread: &str, key: &str) -> [Action; 2] {
    let path = format!(
        "/v1/runs/{}/effects/{}/resolve",
        savepoint_client::fmt::encode(thread),
        savepoint_client::fmt::encode(key)
    );
    let applied = Action {
        dangerous: true,
        ..api_action(
            format!(
                "The provider shows the effect {key} happened: record it as applied with its \
                 result; the run continues without performing it again"
            ),
            format!(
                "savepoint resolve {} {} --applied true --result '<json>'",
                sh(thread),
                sh(key)
            ),
            "POST",
            path.clone(),
            Some(json!({"applied": true, "result": "<json>"})),
        )
    };
    let released = Action {
        dangerous: true,
        ..api_action(
            format!(
                "The provider shows the effect {key} did not happen: release it; the run \
                 performs it (once)"
            ),
            format!("savepoint resolve {} {} --applied false", sh(thread), sh(key)),
            "POST",
            path,
            Some(json!({"applied": false})),
        )
    };
    [applied, released]
}
