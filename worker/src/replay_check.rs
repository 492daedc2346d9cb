//! The deploy gate on live runs (`<worker> replay-check`, [`replay_check`]): replays the
//! journal of every live run of a namespace against the workflows registered in this build,
//! read-only (no lease taken, no call run, nothing written), and says per run whether the new
//! code takes it on cleanly, would block it, or diverges from it, with the fix in terms of the
//! API. Identical findings are grouped: 10,000 runs that diverge at the same call are one line.

use futures::StreamExt;
use std::collections::BTreeMap;
use std::time::Duration;

use savepoint::workflow::Registry;
use savepoint_core::ids::ThreadId;
use savepoint_store::{RunHeader, RunStatus, ScriptStore, StoreError};

use crate::replay::{replay_stored, ReplayReport};

/// The statuses of a live run: what a deploy meets.
pub const LIVE: [RunStatus; 6] = [
    RunStatus::Waiting,
    RunStatus::Sleeping,
    RunStatus::Pending,
    RunStatus::Running,
    RunStatus::Blocked,
    RunStatus::Paused,
];

/// Runs replayed at once (each one a journal read, then CPU).
const CHECKS_AT_ONCE: usize = 32;

/// Which runs to check.
#[derive(Debug, Clone)]
pub struct CheckOptions {
    /// Only runs of this workflow.
    pub workflow: Option<String>,
    /// At most this many runs of each status (the newest; waiting, blocked and paused runs
    /// come from their own indexes however old).
    pub per_status: usize,
}

impl Default for CheckOptions {
    fn default() -> Self {
        Self {
            workflow: None,
            per_status: 100_000,
        }
    }
}

/// What replaying one run found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Verdict {
    /// The new code replays it: its recorded calls are the ones it makes.
    Clean,
    /// The new code replays it once recorded values are upgraded through the migrations it
    /// declares (`Versioned::upgrade`): it takes the run on.
    Migrated,
    /// The new code makes another call than the one recorded (or returns where calls remain):
    /// the run would block with non-determinism.
    NonDeterministic,
    /// A recorded value does not decode into the new code's types, or the replay fails for
    /// another reason: the run would block.
    WouldBlock,
    /// This build does not serve the run's workflow or its version: it would wait for a worker
    /// that does (not a block).
    NotServed,
    /// The run needs a run feature this build's workers do not name (a value recorded under a
    /// versioned type's name this build does not declare, or an engine feature of a newer
    /// build): its claims would give the run back, and once the builds that name it are gone
    /// it waits for ever. The deploy must not go on.
    WouldWait,
}

/// One kind of finding, with the runs that share it.
#[derive(Debug, Clone)]
pub struct Finding {
    /// The verdict.
    pub verdict: Verdict,
    /// The workflow and the version its runs are recorded at.
    pub workflow: String,
    /// The recorded version.
    pub version: u32,
    /// What the replay said.
    pub detail: String,
    /// The fix, in terms of the API (empty when there is none to give).
    pub hint: String,
    /// How many runs share it.
    pub runs: usize,
    /// A few of them.
    pub examples: Vec<String>,
}

/// What [`replay_check`] found.
#[derive(Debug, Clone, Default)]
pub struct CheckReport {
    /// Runs replayed.
    pub checked: usize,
    /// Runs the new code replays cleanly.
    pub clean: usize,
    /// Everything else, grouped.
    pub findings: Vec<Finding>,
    /// How long it took.
    pub elapsed: Duration,
}

impl CheckReport {
    /// True when a run would block under the new code (non-determinism, an undecodable value):
    /// the deploy must not go on.
    pub fn blocks(&self) -> bool {
        self.findings.iter().any(|f| {
            matches!(
                f.verdict,
                Verdict::NonDeterministic | Verdict::WouldBlock | Verdict::WouldWait
            )
        })
    }

    /// Runs checked per second.
    pub fn rate(&self) -> f64 {
        self.checked as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }

    /// The report as text: one line per finding, its hint under it, then the totals.
    pub fn render(&self) -> String {
        let mut out = String::new();
        for f in &self.findings {
            out.push_str(&format!(
                "{:?}: {} v{} ({} run(s), e.g. {}): {}\n",
                f.verdict,
                f.workflow,
                f.version,
                f.runs,
                f.examples.join(", "),
                f.detail
            ));
            for line in f.hint.lines() {
                out.push_str(&format!("    {line}\n"));
            }
        }
        out.push_str(&format!(
            "checked {} live run(s) in {:.1} s ({:.0}/s): {} clean, {} through migrations, {} would block, {} would \
             wait for a feature this build does not name\n",
            self.checked,
            self.elapsed.as_secs_f64(),
            self.rate(),
            self.clean,
            self.findings
                .iter()
                .filter(|f| f.verdict == Verdict::Migrated)
                .map(|f| f.runs)
                .sum::<usize>(),
            self.findings
                .iter()
                .filter(|f| matches!(f.verdict, Verdict::NonDeterministic | Verdict::WouldBlock))
                .map(|f| f.runs)
                .sum::<usize>(),
            self.findings
                .iter()
                .filter(|f| f.verdict == Verdict::WouldWait)
                .map(|f| f.runs)
                .sum::<usize>()
        ));
        out
    }
}

/// Replays every live run the options select against `registry`, read-only.
pub async fn replay_check(
    store: &ScriptStore,
    registry: &Registry,
    opts: &CheckOptions,
) -> Result<CheckReport, StoreError> {
    let started = tokio::time::Instant::now();
    let known = crate::runtime::known_features(registry);
    let served: BTreeMap<String, (u32, u32)> = registry
        .catalog()
        .into_iter()
        .map(|e| (e.name, (e.min_version, e.version)))
        .collect();
    let mut groups: BTreeMap<(Verdict, String, u32, String), Finding> = BTreeMap::new();
    let mut report = CheckReport::default();
    for status in LIVE {
        let runs: Vec<RunHeader> = store
            .list(Some(status), opts.per_status)
            .await?
            .into_iter()
            .filter(|h| opts.workflow.as_ref().is_none_or(|w| *w == h.workflow))
            .collect();
        // Each replay reads its run's journal: CHECKS_AT_ONCE of them in flight.
        let checked: Vec<_> = futures::stream::iter(runs.iter())
            .map(|h| check_one(store, registry, (&served, &known), &h.thread, h))
            .buffered(CHECKS_AT_ONCE)
            .collect()
            .await;
        for (h, r) in runs.iter().zip(checked) {
            let (verdict, detail) = r?;
            report.checked += 1;
            if verdict == Verdict::Clean {
                report.clean += 1;
                continue;
            }
            let key = (verdict, h.workflow.clone(), h.workflow_version, detail.clone());
            let f = groups.entry(key).or_insert_with(|| Finding {
                verdict,
                workflow: h.workflow.clone(),
                version: h.workflow_version,
                hint: hint(verdict, h, &detail, &served),
                detail,
                runs: 0,
                examples: Vec::new(),
            });
            f.runs += 1;
            if f.examples.len() < 3 {
                f.examples.push(h.thread.to_string());
            }
        }
    }
    report.findings = groups.into_values().collect();
    report.elapsed = started.elapsed();
    Ok(report)
}

/// Replays one run (its journal read now) and says what the new code makes of it.
async fn check_one(
    store: &ScriptStore,
    registry: &Registry,
    (served, known): (&BTreeMap<String, (u32, u32)>, &[String]),
    thread: &ThreadId,
    h: &RunHeader,
) -> Result<(Verdict, String), StoreError> {
    match served.get(&h.workflow) {
        None => return Ok((Verdict::NotServed, "this build does not register the workflow".into())),
        Some((min, max)) if !(min..=max).contains(&&h.workflow_version) => {
            return Ok((
                Verdict::NotServed,
                format!("this build serves v{min}..=v{max}: the run waits for a worker that serves its version"),
            ))
        }
        Some(_) => {}
    }
    if let Some(missing) = h.needs.iter().find(|n| !known.contains(n)) {
        return Ok((
            Verdict::WouldWait,
            format!(
                "the run needs the run feature {missing}, which this build's workers do not name: their claims \
                 give it back"
            ),
        ));
    }
    let (report, migrated) = match replay_stored(store, registry, thread).await {
        Ok(r) => r,
        // (A run that went away since it was listed is not live any more.)
        Err(StoreError::Missing(_)) => return Ok((Verdict::Clean, String::new())),
        Err(e) => return Err(e),
    };
    Ok(match report {
        // A recorded value the new type does not read: the worker blocks such a run.
        ReplayReport::Undecodable(e) => (Verdict::WouldBlock, e),
        ReplayReport::Finished(_) | ReplayReport::WouldRunLive(_) if migrated > 0 => (
            Verdict::Migrated,
            "replays once its recorded values are upgraded through the declared migrations".to_owned(),
        ),
        ReplayReport::Finished(_) | ReplayReport::WouldRunLive(_) => (Verdict::Clean, String::new()),
        ReplayReport::Diverged(d) if d.starts_with("non-determinism") => (Verdict::NonDeterministic, d),
        ReplayReport::Diverged(d) | ReplayReport::Unavailable(d) => (Verdict::WouldBlock, d),
    })
}

/// The fix for a finding, in terms of the API.
fn hint(verdict: Verdict, h: &RunHeader, detail: &str, served: &BTreeMap<String, (u32, u32)>) -> String {
    let (wf, v) = (&h.workflow, h.workflow_version);
    let next = served.get(wf).map_or(v + 1, |(_, max)| (*max).max(v) + 1);
    match verdict {
        Verdict::NonDeterministic => {
            let gate = patch_advice(detail);
            format!(
                "{gate}\n\
                 or give the new code a new version, VERSION = {next} and MIN_VERSION = {next}, and keep a worker \
                 of the old build serving {wf} v{v} until these runs end (new runs start at v{next})"
            )
        }
        Verdict::WouldBlock if detail.contains(" cannot be read: ") => format!(
            "a recorded value is at a version of its type this build cannot upgrade: declare the missing step in \
             the type's `Versioned::upgrade` (from the recorded version to the next, up to VERSION) and list the \
             type in the workflow's `versions()`, or keep a worker of the build that wrote it serving {wf} v{v} \
             until these runs end"
        ),
        Verdict::WouldBlock if detail.contains(" does not decode: ") => undecodable(detail, wf, v),
        Verdict::WouldBlock => format!(
            "keep a worker of the old build serving {wf} v{v} until these runs end, or fix what the replay \
             names; after a fix, `savepoint retry <thread>` re-queues a blocked run"
        ),
        Verdict::NotServed => {
            format!("deploy the new build beside a worker that still serves {wf} v{v}, or lower MIN_VERSION to {v}")
        }
        Verdict::WouldWait if detail.contains("run feature value:") => format!(
            "a value these runs recorded is named by a versioned type this build does not declare under that name: \
             if the type moved or was renamed, list the recorded name (after `value:`, before `@`) in its \
             `Versioned::FORMERLY`; if this build dropped the type, declare it again, or keep a worker of the build \
             that wrote it serving {wf} v{v} until these runs end; a run no build will ever read is let go with \
             `savepoint forget-feature <thread> <feature>` (it then blocks on the value it cannot read, or runs \
             on if it never reads it)"
        ),
        Verdict::WouldWait => format!(
            "these runs use an engine feature of a newer build: keep a worker of that build serving {wf} v{v} \
             until these runs end"
        ),
        Verdict::Clean | Verdict::Migrated => String::new(),
    }
}

/// The fix for a recorded value that no longer reads into the code's type: a version of the
/// type with the migration from the recorded shape (the field the decoder missed, the type,
/// the recorded fields come from the replay's detail).
fn undecodable(detail: &str, wf: &str, v: u32) -> String {
    let between = |from: &str, to: char| {
        detail
            .split_once(from)
            .and_then(|(_, r)| r.split_once(to))
            .map(|(x, _)| x.to_owned())
    };
    let field = between("missing field `", '`');
    let path = between("the code reads it as `", '`').unwrap_or_else(|| "<the type>".into());
    let ty = path.rsplit("::").next().unwrap_or(&path).to_owned();
    let what = field
        .as_ref()
        .map_or_else(String::new, |f| format!(" (the recorded value has no `{f}`)"));
    let new = field.unwrap_or_else(|| "<new field>".into());
    format!(
        "a value these runs recorded no longer reads into `{path}`{what}: give the type a version, so that a \
         replay upgrades the recorded shape before the code sees it:\n\
         \x20   impl Versioned for {ty} {{\n\
         \x20       const NAME: &'static str = \"<your app>.{ty}\";\n\
         \x20       const VERSION: u32 = 2;\n\
         \x20       fn upgrade(from: u32, mut v: Value) -> Result<Value, Migration> {{\n\
         \x20           match from {{\n\
         \x20               1 => {{\n\
         \x20                   // e.g. a renamed field: move the recorded one to `{new}`\n\
         \x20                   let o = v.as_object_mut().ok_or(Migration::Missing)?;\n\
         \x20                   let old = o.remove(\"<recorded field>\").ok_or(Migration::Missing)?;\n\
         \x20                   o.insert(\"{new}\".into(), old);\n\
         \x20                   Ok(v)\n\
         \x20               }}\n\
         \x20               _ => Err(Migration::Missing),\n\
         \x20           }}\n\
         \x20       }}\n\
         \x20   }}\n\
         and list it in {wf}'s `versions()`: `Versions::new().of::<{ty}>()`; run replay-check again and these runs \
         show as Migrated. (A pure rename can instead keep `#[serde(alias = \"<recorded field>\")]` on the \
         field.) Until then keep a worker of the old build serving {wf} v{v}; a run already blocked is re-queued \
         with `savepoint retry <thread>` after the fix"
    )
}

/// The patch gate for a divergence, by the shape of the change the replay found (see
/// `replay.rs`'s `shape`): each keeps the recorded calls for the runs that made them and
/// gives new runs every call of the new code.
fn patch_advice(detail: &str) -> String {
    let (now, then) = calls(detail);
    if let Some((_, rest)) = detail.split_once(" — returned early: these runs recorded ") {
        let list = rest.split(" from entry ").next().unwrap_or(rest);
        return format!(
            "the new code returns where these runs recorded more calls ({list}): keep them for these runs, \
             behind a patch gate before the return:\n\
             +   if !ctx.patched(\"<change-id>\").await {{ <the calls these runs recorded, in order> }}"
        );
    }
    if let Some((_, rest)) = detail.split_once(" — recorded later: ") {
        let between = rest.split_once(", after ").map_or("", |(_, b)| b);
        return format!(
            "these runs made {between} before {now}: those calls were removed, or moved after it. Keep the \
             recorded order for these runs, behind a patch gate:\n\
             +   if ctx.patched(\"<change-id>\").await {{\n\
             +       <the new code from here: {now}, …>\n\
             +   }} else {{\n\
             +       <the recorded order: {between}, then {now}, …>\n\
             +   }}"
        );
    }
    if detail.contains(" — new call: ") {
        return format!(
            "{now} is new to these runs. If it was INSERTED before {then} (the new code calls {then} after \
             it), gate only the new call and keep the recorded one after it, unconditionally:\n\
             +   if ctx.patched(\"<change-id>\").await {{ {now}.await?; }}\n\
             \x20   {then}.await?;      (unchanged: these runs replay it, new runs call it after the new one)\n\
             If it REPLACED {then}, keep the recorded call for these runs:\n\
             +   if ctx.patched(\"<change-id>\").await {{ {now} }} else {{ {then} }}"
        );
    }
    format!(
        "keep the recorded path for the runs that took it, behind a patch gate:\n\
         -   {then}                                  (what these runs recorded)\n\
         +   if ctx.patched(\"<change-id>\").await {{ {now} }} else {{ {then} }}"
    )
}

/// The call the code makes now and the one the run recorded, from a divergence message
/// ("… the workflow called step \"b\" but the journal recorded step \"a\"").
fn calls(detail: &str) -> (String, String) {
    let call = |s: &str| format!("ctx.{}", s.trim().replacen(' ', "(", 1) + ", …)");
    match detail
        .split_once("the workflow called ")
        .and_then(|(_, r)| r.split_once(" but the journal recorded "))
    {
        Some((now, then)) => {
            let then = then.split(" — ").next().unwrap_or(then);
            (call(now), call(then.split(" (").next().unwrap_or(then)))
        }
        None => ("<the new call>".into(), "<the recorded call>".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_divergence_reads_as_the_two_calls() {
        let (now, then) = calls(
            "non-determinism at entry 1: the workflow called step \"charge_v2\" but the journal recorded step \"charge\"",
        );
        assert_eq!(now, "ctx.step(\"charge_v2\", …)");
        assert_eq!(then, "ctx.step(\"charge\", …)");
        assert_eq!(calls("something else").0, "<the new call>");
    }
}
