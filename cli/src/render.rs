//! Readable output of API answers (the `--json` flag prints the raw JSON instead).
//! Plain functions from JSON to text, so they are testable without a server.

use serde_json::Value;
use std::fmt::Write;

pub use savepoint_client::fmt::timestamp;

pub(crate) fn text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

fn time_field(v: &Value, key: &str) -> Option<String> {
    v.get(key).and_then(Value::as_u64).filter(|ms| *ms > 0).map(timestamp)
}

fn lines(rows: &[(&str, String)]) -> String {
    let width = rows.iter().map(|(k, _)| k.len()).max().unwrap_or(0);
    rows.iter().map(|(k, v)| format!("{k:<width$}  {v}\n")).collect()
}

fn clip(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        s.to_owned()
    } else {
        let cut: String = s.chars().take(max.saturating_sub(1)).collect();
        format!("{cut}…")
    }
}

/// `savepoint doctor`: the verdict, the evidence, what settles it, the last events.
pub fn diagnosis(v: &Value) -> String {
    let mut out = format!(
        "{}  [{}{}]\n{}\n",
        text(&v["thread_id"]),
        text(&v["case"]),
        if v["progressing"] == Value::Bool(true) {
            ", progressing"
        } else {
            ", not progressing"
        },
        text(&v["summary"])
    );
    let list = |v: &Value| v.as_array().cloned().unwrap_or_default();
    out.push_str("\nevidence:\n");
    for e in list(&v["evidence"]) {
        let _ = writeln!(out, "  - {}", text(&e));
    }
    let actions = list(&v["actions"]);
    if !actions.is_empty() {
        out.push_str("\nto settle it:\n");
        for a in actions {
            let _ = writeln!(out, "  - {}", text(&a["label"]));
            let cmd = text(&a["command"]);
            if !cmd.is_empty() {
                let _ = writeln!(out, "      $ {cmd}");
            }
        }
    }
    let events = list(&v["events"]);
    if !events.is_empty() {
        out.push_str("\nlast events:\n");
        for e in events {
            let at = e["at"].as_u64().map(timestamp).unwrap_or_default();
            let _ = writeln!(
                out,
                "  {at}  {:<16} {}",
                text(&e["type"]),
                clip(&text(&e["detail"]), 100)
            );
        }
    }
    out
}

/// `savepoint schedule get`: one aligned line per field.
pub fn schedule(v: &Value) -> String {
    let spec = &v["spec"];
    let when = match (spec["cron"].as_str(), spec["every_secs"].as_u64()) {
        (Some(c), _) => format!("cron {c:?} in {}", spec["timezone"].as_str().unwrap_or("UTC")),
        (None, Some(n)) => format!("every {n} s"),
        _ => "?".into(),
    };
    let mut rows: Vec<(&str, String)> = vec![
        ("schedule", text(&v["id"])),
        ("workflow", text(&spec["workflow"])),
        ("fires", when),
        ("state", text(&v["state"])),
        ("overlap", text(&spec["overlap"])),
        (
            "catch-up",
            format!(
                "{} (window {} s, limit {})",
                text(&spec["catchup"]),
                text(&spec["catchup_window_secs"]),
                text(&spec["catchup_limit"])
            ),
        ),
    ];
    if let Some(n) = v["note"].as_str() {
        rows.push(("note", n.to_owned()));
    }
    let next: Vec<String> = v["upcoming"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_u64)
        .map(timestamp)
        .collect();
    if !next.is_empty() {
        rows.push(("next", next.join(", ")));
    }
    if let Some(t) = v["last_run"].as_str() {
        rows.push(("last run", t.to_owned()));
    }
    if let Some(t) = time_field(v, "buffered_at") {
        rows.push(("buffered", t));
    }
    rows.push(("fired", text(&v["fired"])));
    rows.push(("skipped", text(&v["skipped"])));
    lines(&rows)
}

/// `savepoint schedule list`: a line per schedule.
pub fn schedules(v: &Value) -> String {
    let list = v["schedules"].as_array().cloned().unwrap_or_default();
    if list.is_empty() {
        return "no schedules\n".into();
    }
    list.iter()
        .map(|s| {
            format!(
                "{}  {}  {}  next {}  fired {}  skipped {}\n",
                text(&s["id"]),
                text(&s["spec"]["workflow"]),
                text(&s["state"]),
                time_field(s, "next_at").unwrap_or_else(|| "-".into()),
                text(&s["fired"]),
                text(&s["skipped"])
            )
        })
        .collect()
}

/// `savepoint fork`: the new run and where it came from.
pub fn forked(v: &Value) -> String {
    format!(
        "forked {} from {} at entry {}: {}\n",
        text(&v["thread_id"]),
        text(&v["forked_from"]["thread_id"]),
        text(&v["forked_from"]["from_step"]),
        text(&v["status"])
    )
}

/// `savepoint get`: one aligned line per field that has a value.
pub fn run(v: &Value) -> String {
    let mut rows: Vec<(&str, String)> = vec![
        ("thread", text(&v["thread_id"])),
        (
            "workflow",
            format!("{}@{}", text(&v["workflow"]), text(&v["workflow_version"])),
        ),
        ("status", text(&v["status"])),
    ];
    // Where it is, in words (the entry it waits at, its wake time, how overdue), then how
    // many entries it has recorded.
    if let Some(at) = v["at"]["text"].as_str() {
        rows.push(("at", at.to_owned()));
    }
    if let Some(t) = time_field(&v["at"], "wake_at") {
        rows.push(("wakes", t));
    }
    rows.push(("entries", text(&v["step"])));
    lineage_rows(v, &mut rows);
    let next: Vec<String> = v["next"]
        .as_array()
        .map(|a| a.iter().map(text).collect())
        .unwrap_or_default();
    if !next.is_empty() {
        rows.push(("next", next.join(", ")));
    }
    for i in v["interrupts"].as_array().into_iter().flatten() {
        rows.push(("interrupt", format!("{}: {}", text(&i["name"]), i["payload"])));
    }
    if let Some(w) = v.get("wait").filter(|w| w["kind"] == "signal") {
        rows.push(("waits for", format!("signal {}", text(&w["name"]))));
    }
    if let Some(w) = v.get("waiting").filter(|w| w.is_object()) {
        rows.push(("waiting on", waiting_text(w)));
        if let Some(t) = time_field(w, "until") {
            rows.push(("until", t));
        }
    }
    for (label, key) in [
        ("output", "output"),
        ("error", "error"),
        ("blocked", "blocked_reason"),
        ("effect", "blocked_effect"),
        ("cancelled", "cancel_reason"),
    ] {
        if let Some(x) = v.get(key).filter(|x| !x.is_null()) {
            rows.push((label, text(x)));
        }
    }
    rows.push(("attempt", text(&v["attempt"])));
    for (label, key) in [
        ("due", "due_at"),
        ("deadline", "deadline_at"),
        ("created", "created_at"),
        ("updated", "updated_at"),
        ("finished", "finished_at"),
    ] {
        if let Some(t) = time_field(v, key) {
            rows.push((label, t));
        }
    }
    lines(&rows)
}

/// The run's place among others: forked from, queue, parent, children, restarts.
fn lineage_rows(v: &Value, rows: &mut Vec<(&str, String)>) {
    if let Some(f) = v.get("forked_from") {
        rows.push((
            "forked from",
            format!("{} at entry {}", text(&f["thread_id"]), text(&f["from_step"])),
        ));
    }
    if let Some(q) = v.get("queue") {
        rows.push(("queue", text(q)));
    }
    if let Some(p) = v.get("parent") {
        rows.push((
            "parent",
            format!("{} (its entry {})", text(&p["thread_id"]), text(&p["index"])),
        ));
    }
    if let Some(children) = v.get("children").and_then(Value::as_array) {
        let list: Vec<String> = children
            .iter()
            .map(|c| format!("{} (entry {})", text(&c["thread_id"]), text(&c["index"])))
            .collect();
        rows.push(("children", list.join(", ")));
    }
    if let Some(n) = v.get("restarts").and_then(Value::as_u64) {
        rows.push((
            "restarted",
            format!("{n} time(s), last from entry {}", text(&v["restarted_from"])),
        ));
    }
}

/// `savepoint history`: a table of journal entries, then the events.
pub fn history(v: &Value) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "run {} ({})", text(&v["thread_id"]), text(&v["status"]));
    let entries = v["entries"].as_array().cloned().unwrap_or_default();
    let _ = writeln!(out, "\njournal ({} entries)", entries.len());
    if !entries.is_empty() {
        let _ = writeln!(
            out,
            "{:>4}  {:<24} {:<9} {:<7} {:>3}  result",
            "#", "name", "kind", "outcome", "try"
        );
    }
    for e in &entries {
        let result = match e.get("error").filter(|x| !x.is_null()) {
            Some(err) => format!("error: {}", text(err)),
            None => e["result"].to_string(),
        };
        let key = e
            .get("key")
            .and_then(Value::as_str)
            .map(|k| format!(" [{k}]"))
            .unwrap_or_default();
        let _ = writeln!(
            out,
            "{:>4}  {:<24} {:<9} {:<7} {:>3}  {}{key}",
            text(&e["index"]),
            clip(&text(&e["name"]), 24),
            text(&e["kind"]),
            text(&e["outcome"]),
            text(&e["attempts"]),
            clip(&result, 80)
        );
    }
    let events = v["events"].as_array().cloned().unwrap_or_default();
    let _ = writeln!(out, "\nevents ({})", events.len());
    for e in &events {
        let at = e["at"].as_u64().map(timestamp).unwrap_or_default();
        let _ = writeln!(out, "  {at}  {:<18} {}", text(&e["type"]), text(&e["detail"]));
    }
    out
}

/// `savepoint list`: one row per run.
pub fn list(v: &Value) -> String {
    let runs = v["runs"].as_array().cloned().unwrap_or_default();
    if runs.is_empty() {
        return "no runs\n".to_owned();
    }
    let width = runs
        .iter()
        .map(|r| text(&r["thread_id"]).len())
        .max()
        .unwrap_or(6)
        .max(6);
    let mut out = format!(
        "{:<width$}  {:<16} {:<10} {:>5}  updated\n",
        "thread", "workflow", "status", "step"
    );
    for r in &runs {
        let updated = r["updated_at"].as_u64().map(timestamp).unwrap_or_default();
        let _ = writeln!(
            out,
            "{:<width$}  {:<16} {:<10} {:>5}  {updated}",
            text(&r["thread_id"]),
            clip(&text(&r["workflow"]), 16),
            text(&r["status"]),
            text(&r["step"])
        );
        if let Some(w) = r.get("waiting").filter(|w| w.is_object()) {
            let _ = writeln!(out, "{:<width$}  {}", "", waiting_text(w));
        }
    }
    out
}

/// A run's waiting cause in a line: the cause, its sentence and the estimate.
fn waiting_text(w: &Value) -> String {
    let est = match time_field(&w["estimate"], "at") {
        Some(t) => format!("runs ~{t} ({})", text(&w["estimate"]["how"])),
        None => text(&w["estimate"]["how"]),
    };
    format!("{}: {} {est}", text(&w["on"]), text(&w["summary"]))
}

/// The versions a workflow is served at: `v2`, or `v1-3` for a range (`min_version` to
/// `version`).
fn versions(v: &Value) -> String {
    match (v["min_version"].as_u64(), v["version"].as_u64()) {
        (Some(lo), Some(hi)) if lo != hi => format!("v{lo}-{hi}"),
        _ => format!("v{}", text(&v["version"])),
    }
}

/// `savepoint workers`: one line per live worker (a silent one says for how long).
pub fn workers(v: &Value) -> String {
    let workers = v["workers"].as_array().cloned().unwrap_or_default();
    if workers.is_empty() {
        return "no live workers\n".to_owned();
    }
    let now = v["server_time"].as_u64().unwrap_or(0);
    let width = workers.iter().map(|w| text(&w["id"]).len()).max().unwrap_or(6).max(6);
    let mut out = format!(
        "{:<width$}  {:<20} {:<16} {:>9} {:>9}  {:<12} serves\n",
        "worker", "host", "queues", "in flight", "steps", "heartbeat"
    );
    for w in &workers {
        let queues = w["queues"]
            .as_array()
            .map(|q| q.iter().map(text).collect::<Vec<_>>().join(","));
        let serves: Vec<String> = w["serves"]
            .as_array()
            .map(|s| {
                s.iter()
                    .map(|e| format!("{} {}", text(&e["workflow"]), versions(e)))
                    .collect()
            })
            .unwrap_or_default();
        let ago = now.saturating_sub(w["last_heartbeat_at"].as_u64().unwrap_or(now));
        let heartbeat = match w["silent_ms"].as_u64() {
            Some(ms) => format!("SILENT {}s", ms / 1000),
            None => format!("{:.1}s ago", ago as f64 / 1000.0),
        };
        let _ = writeln!(
            out,
            "{:<width$}  {:<20} {:<16} {:>9} {:>9}  {:<12} {}",
            text(&w["id"]),
            clip(&format!("{}:{}", text(&w["host"]), text(&w["pid"])), 20),
            clip(&queues.unwrap_or_default(), 16),
            format!("{}/{}", text(&w["in_flight"]), text(&w["concurrency"])),
            text(&w["steps"]),
            heartbeat,
            serves.join(", ")
        );
    }
    out
}

/// `savepoint workflows`: one line per workflow a live worker serves.
pub fn workflows(v: &Value) -> String {
    let workflows = v["workflows"].as_array().cloned().unwrap_or_default();
    if workflows.is_empty() {
        return "no workflow is served by a live worker\n".to_owned();
    }
    let width = workflows
        .iter()
        .map(|w| text(&w["name"]).len())
        .max()
        .unwrap_or(8)
        .max(8);
    let mut out = format!(
        "{:<width$}  {:<9} {:>7}  {:<16} runs\n",
        "workflow", "versions", "workers", "queues"
    );
    for w in &workflows {
        let queues = w["queues"]
            .as_array()
            .map(|q| q.iter().map(text).collect::<Vec<_>>().join(","));
        let runs: Vec<String> = w["runs"]
            .as_object()
            .map(|m| m.iter().map(|(s, n)| format!("{s} {}", text(n))).collect())
            .unwrap_or_default();
        let _ = writeln!(
            out,
            "{:<width$}  {:<9} {:>7}  {:<16} {}",
            text(&w["name"]),
            versions(w),
            text(&w["workers"]),
            clip(&queues.unwrap_or_default(), 16),
            if runs.is_empty() {
                "none".to_owned()
            } else {
                runs.join(", ")
            }
        );
        for p in w["paused"].as_array().into_iter().flatten() {
            let _ = writeln!(out, "  ⏸ {}", pause_line(p));
        }
    }
    if v["runs_capped"] == Value::Bool(true) {
        let _ = writeln!(
            out,
            "(runs counted among the newest {} of the namespace, and every blocked and waiting run)",
            text(&v["runs_counted"])
        );
    }
    out
}

/// One line for answers of start / resume / signal / cancel / resolve.
pub fn ack(action: &str, v: &Value) -> String {
    let thread = text(&v["thread_id"]);
    if v["buffered"] == Value::Bool(true) {
        return format!("{action} {thread}: buffered until the run asks for it\n");
    }
    if v["duplicate"] == Value::Bool(true) {
        return format!("{action} {thread}: already delivered with this id (nothing changed)\n");
    }
    let mut s = format!("{action} {thread}: {}", text(&v["status"]));
    if let Some(e) = v.get("effect").and_then(|e| e.get("state")) {
        let _ = write!(s, " (effect {})", text(e));
    }
    s.push('\n');
    s
}

/// One pause: `workflow invoice (v2) by alice at <ISO 8601 UTC>: note [holds timers]`.
fn pause_line(p: &Value) -> String {
    let scope = match text(&p["scope"]).as_str() {
        "workflow" => format!("workflow {}", text(&p["workflow"])),
        "version" => format!("workflow {} v{}", text(&p["workflow"]), p["version"]),
        "queue" => format!("queue {}", text(&p["queue"])),
        _ => "the run".to_owned(),
    };
    let mut s = format!("{scope} paused by {}", text(&p["by"]));
    if let Some(at) = p["at"].as_i64().and_then(chrono::DateTime::from_timestamp_millis) {
        let _ = write!(s, " at {}", at.to_rfc3339_opts(chrono::SecondsFormat::Millis, true));
    }
    let note = text(&p["note"]);
    if !note.is_empty() {
        let _ = write!(s, ": {note}");
    }
    if p["hold_timers"] == Value::Bool(true) {
        s.push_str(" [timers held]");
    }
    s
}

/// `savepoint pauses`.
pub fn pauses(v: &Value) -> String {
    let list = v["pauses"].as_array().cloned().unwrap_or_default();
    let mut out = String::new();
    if list.is_empty() {
        out.push_str("no workflow, version or queue is paused\n");
    }
    for p in &list {
        let _ = writeln!(out, "{}", pause_line(p));
    }
    let _ = writeln!(
        out,
        "runs stopped by a pause: {}",
        v["paused_runs"].as_u64().unwrap_or(0)
    );
    out.push_str(&unenforced(v));
    out
}

/// The answer of `savepoint pause` / `unpause`.
pub fn paused(action: &str, v: &Value) -> String {
    if v.get("thread_id").is_some() {
        let mut s = format!("{action} {}: {}", text(&v["thread_id"]), text(&v["status"]));
        if let Some(h) = v.get("held_by").filter(|h| h.is_object()) {
            let _ = write!(s, " (still held: {})", pause_line(h));
        }
        s.push('\n');
        s.push_str(&unenforced(v));
        return s;
    }
    let mut s = match v.get("pause").filter(|p| p.is_object()) {
        Some(p) => format!("{action}: {}", pause_line(p)),
        None => format!("{action}: {} runs", v["runs"].as_u64().unwrap_or(0)),
    };
    if let Some(n) = v["resumed"].as_u64() {
        let _ = write!(s, "; {n} runs put back");
    }
    if let Some(n) = v["still_held"].as_u64().filter(|n| *n > 0) {
        let _ = write!(s, ", {n} still held by another pause");
    }
    s.push('\n');
    s.push_str(&unenforced(v));
    s
}

/// A forced pause's warning: the live workers that may still claim what it holds.
fn unenforced(v: &Value) -> String {
    match v["unenforced_by"].as_array().filter(|w| !w.is_empty()) {
        Some(w) => format!(
            "warning: not enforced by {} (a build from before pauses): stop or upgrade them\n",
            w.iter().map(text).collect::<Vec<_>>().join(", ")
        ),
        None => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_waiting_cause_reads_as_a_line_with_its_estimate() {
        let run = json!({"thread_id": "t", "workflow": "w", "workflow_version": 1, "status": "sleeping",
            "step": 2, "attempt": 1, "waiting": {"on": "timer", "summary": "Sleeping on the durable timer \"nap\".",
            "until": 1_000, "estimate": {"at": 1_000, "how": "the timer's due time"}}});
        let out = super::run(&run);
        let expected = format!(
            "waiting on  timer: Sleeping on the durable timer \"nap\". runs ~{} (the timer's due time)",
            timestamp(1_000)
        );
        assert!(out.contains(&expected), "{out}");
        assert!(out.contains(&format!("until       {}", timestamp(1_000))), "{out}");
        let listed = json!({"runs": [{"thread_id": "t", "workflow": "w", "status": "waiting", "step": 1,
            "updated_at": 5, "waiting": {"on": "human", "summary": "Waiting for a human.",
            "estimate": {"how": "unknown: when someone answers"}}}]});
        assert!(list(&listed).contains("human: Waiting for a human. unknown: when someone answers"));
    }

    #[test]
    fn pauses_read_as_sentences() {
        let v = json!({"pauses": [{"scope": "workflow", "workflow": "invoice", "by": "alice", "at": 5,
            "hold_timers": true, "note": "provider down"}], "paused_runs": 3});
        assert_eq!(
            pauses(&v),
            "workflow invoice paused by alice at 1970-01-01T00:00:00.005Z: provider down [timers held]\nruns stopped by a pause: 3\n"
        );
        let r = json!({"pause": {"scope": "queue", "queue": "gpu", "by": "bob", "at": 1, "hold_timers": false},
            "resumed": 4, "still_held": 1});
        assert_eq!(
            paused("unpaused", &r),
            "unpaused: queue gpu paused by bob at 1970-01-01T00:00:00.001Z; 4 runs put back, 1 still held by another pause\n"
        );
        let run = json!({"thread_id": "t-1", "status": "paused"});
        assert_eq!(paused("paused", &run), "paused t-1: paused\n");
    }

    #[test]
    fn workers_and_workflows_are_one_line_each() {
        let v = json!({"server_time": 20_000, "workers": [
            {"id": "w-1", "host": "h", "pid": 7, "queues": ["default", "gpu"], "in_flight": 2, "concurrency": 8,
             "steps": 40, "last_heartbeat_at": 18_500, "serves": [{"workflow": "order", "min_version": 1, "version": 2}]},
            {"id": "w-2", "host": "h", "pid": 8, "queues": ["default"], "in_flight": 0, "concurrency": 8,
             "steps": 0, "last_heartbeat_at": 1_000, "silent_ms": 19_000, "serves": [{"workflow": "order", "min_version": 2, "version": 2}]}
        ]});
        let out = workers(&v);
        assert!(
            out.contains("w-1") && out.contains("default,gpu") && out.contains("2/8"),
            "{out}"
        );
        assert!(out.contains("1.5s ago") && out.contains("order v1-2"), "{out}");
        assert!(out.contains("SILENT 19s") && out.contains("order v2"), "{out}");
        assert_eq!(workers(&json!({"workers": []})), "no live workers\n");
        let v = json!({"runs_counted": 3, "runs_capped": true, "workflows": [
            {"name": "order", "min_version": 1, "version": 2, "workers": 2, "queues": ["default"],
             "runs": {"completed": 2, "waiting": 1}}
        ]});
        let out = workflows(&v);
        assert!(
            out.contains("order") && out.contains("v1-2") && out.contains("completed 2, waiting 1"),
            "{out}"
        );
        assert!(out.contains("newest 3"), "{out}");
    }

    #[test]
    fn timestamps() {
        assert_eq!(timestamp(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(timestamp(951_782_400_123), "2000-02-29T00:00:00.123Z");
        assert_eq!(timestamp(1_700_000_000_000), "2023-11-14T22:13:20.000Z");
    }

    #[test]
    fn run_lines_are_aligned() {
        let v = json!({"thread_id": "t-1", "workflow": "invoice", "workflow_version": 1, "status": "waiting",
            "step": 3, "attempt": 1, "next": ["approve"], "interrupts": [{"name": "approve", "payload": {"q": 1}}],
            "at": {"entry": 3, "text": "waiting at entry 3 for interrupt \"approve\""},
            "created_at": 1_700_000_000_000u64, "updated_at": 1_700_000_000_000u64});
        let out = run(&v);
        assert!(out.contains("status     waiting\n"), "{out}");
        assert!(
            out.contains("at         waiting at entry 3 for interrupt \"approve\"\n"),
            "{out}"
        );
        assert!(out.contains("entries    3\n"), "{out}");
        assert!(out.contains("interrupt  approve: {\"q\":1}\n"), "{out}");
        assert!(out.contains("next       approve\n"), "{out}");
        assert!(!out.contains("output"));
    }

    #[test]
    fn history_table() {
        let v = json!({"thread_id": "t-1", "status": "completed",
            "entries": [{"index": 0, "name": "read_pdf", "kind": "step", "outcome": "ok", "result": "x", "attempts": 1, "at": 0},
                        {"index": 1, "name": "post", "kind": "effect", "outcome": "error", "result": null, "error": "no", "key": "k:1", "attempts": 3, "at": 0}],
            "events": [{"id": "1-0", "type": "created", "detail": "w@1", "at": 0}]});
        let out = history(&v);
        assert!(out.contains("journal (2 entries)"));
        assert!(out.contains("error: no [k:1]"), "{out}");
        assert!(out.contains("created"));
    }
}
