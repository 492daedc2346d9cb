//! The checks and the ring shared by the handlers that start or answer runs: a value
//! against its workflow's published schema, and the task that wakes a worker afterwards.

use savepoint::workflow::Schemas;
use savepoint_core::ids::ThreadId;
use savepoint_core::protocol::TaskReason;
use savepoint_store::{ScriptStore, StoreError};
use serde_json::Value;
use tracing::warn;

use super::{ApiError, Services};
use crate::publish::Sent;

/// Rings a worker after a state change made the run runnable, then has the marker tell the
/// store that the broker carries the task (ring version `rv`). A failed publish is only
/// logged: the change gave the run a due time, so the scanner rings it later.
pub(crate) async fn ring(
    svc: &Services,
    thread: &ThreadId,
    step: Option<u32>,
    reason: TaskReason,
    trace: Option<&str>,
    rv: u64,
) {
    // To the run's task queue (one read; if it fails, the default queue's worker forwards it),
    // first to the sticky queue of the worker that holds the run's body, if one does.
    let (queue, holder) = svc.store.run_route(thread).await.unwrap_or_default();
    ring_on(
        svc,
        (queue.as_deref(), holder.as_deref()),
        thread,
        step,
        reason,
        trace,
        rv,
    )
    .await
}

/// [`ring`] on a known task queue (`None`: the default queue) and holder (`None`: none).
pub(crate) async fn ring_on(
    svc: &Services,
    (queue, holder): (Option<&str>, Option<&str>),
    thread: &ThreadId,
    step: Option<u32>,
    reason: TaskReason,
    trace: Option<&str>,
    rv: u64,
) {
    match svc
        .publisher
        .publish_on(queue, holder, thread, step, reason, trace)
        .await
    {
        Ok(_) if reason == TaskReason::Start => svc.marker.started(thread.clone()),
        Ok(Sent::Queue) => svc.marker.mark(thread.clone(), rv),
        // A task in a sticky queue keeps the run's nearer net (see `Sent`).
        Ok(Sent::Sticky) => {}
        Err(e) => warn!(thread.id = %thread, error = %e, "publishing a task failed; the due scanner will retry"),
    }
}

/// What a value is checked against: a workflow's published schema of one kind and name.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Expects<'a> {
    Input,
    Interrupt(&'a str),
    Signal(&'a str),
    Effect(&'a str),
}

/// The schemas workers published, as the API last read them: a start or an answer reads
/// Redis at most every [`SCHEMAS_FRESH`] per workflow version, not once per request. (A
/// worker publishes before it registers, and the API starts only registered workflows, so a
/// new version's schemas are never missed; a changed schema under the same version is seen
/// within that time.)
#[derive(Default)]
pub(crate) struct SchemaCache(std::sync::Mutex<SchemaMap>);

type SchemaMap = std::collections::HashMap<(String, u32), (tokio::time::Instant, Option<Schemas>)>;

/// How long the API trusts its copy of a workflow version's schemas.
const SCHEMAS_FRESH: std::time::Duration = std::time::Duration::from_secs(2);

impl SchemaCache {
    async fn get(&self, store: &ScriptStore, workflow: &str, version: u32) -> Result<Option<Schemas>, StoreError> {
        let at = (workflow.to_owned(), version);
        if let Some((read, s)) = self.0.lock().unwrap_or_else(|p| p.into_inner()).get(&at) {
            if read.elapsed() < SCHEMAS_FRESH {
                return Ok(s.clone());
            }
        }
        let s = store.schemas(workflow, version).await?;
        let mut map = self.0.lock().unwrap_or_else(|p| p.into_inner());
        map.insert(at, (tokio::time::Instant::now(), s.clone()));
        Ok(s)
    }
}

/// The schema the workflow `workflow` at `version` published for `what`, if any.
pub(crate) async fn schema_for(
    svc: &Services,
    workflow: &str,
    version: u32,
    what: Expects<'_>,
) -> Result<Option<Value>, ApiError> {
    let Some(s) = svc.schemas.get(&svc.store, workflow, version).await? else {
        return Ok(None);
    };
    Ok(match what {
        Expects::Input => s.input,
        Expects::Interrupt(n) => s.interrupts.get(n).cloned(),
        Expects::Signal(n) => s.signals.get(n).cloned(),
        Expects::Effect(n) => s.effects.get(n).cloned(),
    })
}

/// Refuses (422, nothing changed) a value that breaks its published schema.
pub(crate) fn check_value(
    schema: Option<&Value>,
    value: &Value,
    what: Expects<'_>,
    workflow: &str,
) -> Result<(), ApiError> {
    let Some(schema) = schema else { return Ok(()) };
    crate::schema::validate(schema, value).map_err(|e| {
        let of = match what {
            Expects::Input => "the input".to_owned(),
            Expects::Interrupt(n) => format!("the answer to interrupt {n:?}"),
            Expects::Signal(n) => format!("signal {n:?}"),
            Expects::Effect(n) => format!("the result of effect {n:?}"),
        };
        ApiError::unprocessable(format!(
            "{of} does not match the schema {workflow} published: {e}; nothing was changed"
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::StatusCode;
    use savepoint::workflow::Schemas;
    use schemars::JsonSchema;
    use serde_json::json;

    /// The default: a field the type does not have is ignored.
    #[derive(JsonSchema, serde::Deserialize)]
    #[allow(dead_code)]
    struct Lenient {
        approved: bool,
    }

    /// Opted in: a field the type does not have is refused.
    #[derive(JsonSchema, serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Strict {
        approved: bool,
    }

    #[test]
    fn an_unknown_field_is_refused_only_where_the_type_denies_unknown_fields() {
        let s = Schemas::new()
            .interrupt::<Lenient>("lenient")
            .interrupt::<Strict>("strict")
            .signal::<Strict>("strict_signal");
        let extra = json!({"approved": true, "aproved_by": "ann"});
        let lenient = Expects::Interrupt("lenient");
        assert_eq!(check_value(s.interrupts.get("lenient"), &extra, lenient, "wf"), Ok(()));
        for (schema, what, of) in [
            (
                s.interrupts.get("strict"),
                Expects::Interrupt("strict"),
                "the answer to interrupt \"strict\"",
            ),
            (
                s.signals.get("strict_signal"),
                Expects::Signal("strict_signal"),
                "signal \"strict_signal\"",
            ),
        ] {
            let e = check_value(schema, &extra, what, "wf").expect_err("refused");
            assert_eq!(e.status, StatusCode::UNPROCESSABLE_ENTITY);
            assert!(e.message.starts_with(of), "{}", e.message);
            assert!(
                e.message.contains("'aproved_by'"),
                "the unknown field is named: {}",
                e.message
            );
            assert!(e.message.contains("nothing was changed"), "{}", e.message);
            assert_eq!(check_value(schema, &json!({"approved": false}), what, "wf"), Ok(()));
        }
    }
}
