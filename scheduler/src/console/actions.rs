//! The doctor's diagnosis as the run and attention pages show it: its case by name, and its
//! actions as buttons (calls of the `/v1` API) or as steps left to the operator.

use serde_json::Value;

use crate::api::doctor::{Action, Diagnosis};

/// An action as the page's buttons carry it.
pub(super) struct Button {
    pub(super) label: String,
    pub(super) command: String,
    pub(super) method: String,
    pub(super) path: String,
    pub(super) body: String,
    pub(super) dangerous: bool,
    /// A value the action needs from a text field (`<json>` in its body).
    pub(super) needs_value: bool,
    /// A reason the action needs (`<text>` in its body).
    pub(super) needs_reason: bool,
    /// Short text on the button.
    pub(super) short: String,
}

/// The short text on an action's button, from the API call it makes.
fn short(a: &Action) -> String {
    let p = a.path.as_deref().unwrap_or("");
    if p == "/v1/pauses/resume" {
        "Resume".into()
    } else if p.ends_with("/unpause") {
        "Unpause".into()
    } else if p.ends_with("/pause") {
        "Pause".into()
    } else if p.ends_with("/resume") {
        "Answer".into()
    } else if p.ends_with("/cancel") {
        "Cancel run".into()
    } else if p.ends_with("/retry") {
        "Retry".into()
    } else if p.ends_with("/resolve") {
        if a.body.as_ref().and_then(|b| b.get("applied")) == Some(&Value::Bool(true)) {
            "Resolve: applied".into()
        } else {
            "Resolve: not applied".into()
        }
    } else if p.contains("/signals/") {
        "Send signal".into()
    } else {
        "Do it".into()
    }
}

/// The actions that are API calls as buttons, and the labels of the others (done by hand).
pub(super) fn buttons(actions: &[Action]) -> (Vec<Button>, Vec<String>) {
    let (mut api, mut manual) = (Vec::new(), Vec::new());
    for a in actions {
        match (&a.method, &a.path) {
            (Some(m), Some(p)) => {
                let body = a.body.as_ref().map(Value::to_string).unwrap_or_default();
                api.push(Button {
                    label: a.label.clone(),
                    command: a.command.clone(),
                    method: m.clone(),
                    path: p.clone(),
                    needs_value: body.contains("\"<json>\""),
                    needs_reason: body.contains("\"<text>\""),
                    body,
                    dangerous: a.dangerous,
                    short: short(a),
                })
            }
            _ => manual.push(a.label.clone()),
        }
    }
    (api, manual)
}

/// The diagnosis' case as the API names it (`no_worker`, `effect_in_doubt`, …).
pub(super) fn case_name(d: &Diagnosis) -> String {
    serde_json::to_value(d.case)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_default()
}
