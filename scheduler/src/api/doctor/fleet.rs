//! The live fleet as one run sees it: who serves it, who is gone, who holds its lease.

use savepoint_store::{RunHeader, RunStatus, WorkerInfo};

use super::probe::proves_gone;
use super::{span, when, Facts, LeaseHolder, Server};

/// The workers as the diagnosis of one run sees them.
pub(super) struct Fleet<'a> {
    /// Registered workers that are gone (no heartbeat, or a probe proves the process gone).
    pub silent: Vec<&'a WorkerInfo>,
    /// Live workers serving the run's workflow at its version.
    pub servers: Vec<Server>,
    /// Who serves the run, in a sentence.
    pub servers_text: String,
}

/// True for a registration whose worker is gone: its heartbeats stopped (killed, paused, cut
/// off; it serves nothing until its TTL removes it), or its process does not answer its
/// health listener.
fn is_gone(w: &WorkerInfo, f: &Facts) -> bool {
    w.silent_for(f.now).is_some() || proves_gone(f.health.get(&w.id))
}

/// The live workers (not gone).
fn live(f: &Facts) -> impl Iterator<Item = &WorkerInfo> {
    f.workers.iter().filter(|w| !is_gone(w, f))
}

/// A live worker as a server of the run's workflow.
fn server(h: &RunHeader, w: &WorkerInfo) -> Server {
    let e = w.workflows.iter().find(|e| e.name == h.workflow);
    Server {
        worker: w.id.clone(),
        versions: e
            .map(|e| format!("{}..={}", e.min_version, e.version))
            .unwrap_or_default(),
        last_heartbeat_at: w.last_heartbeat(),
        in_flight: w.in_flight,
    }
}

/// The versions of the run's workflow live workers serve (`v1..=v2`, one per worker).
fn served_versions(h: &RunHeader, f: &Facts) -> Vec<String> {
    live(f)
        .flat_map(|w| w.workflows.iter().filter(|e| e.name == h.workflow))
        .map(|e| format!("v{}..=v{}", e.min_version, e.version))
        .collect()
}

/// Who serves the run, in a sentence (or which versions are served when none serves it).
fn servers_text(h: &RunHeader, f: &Facts, servers: &[Server]) -> String {
    if servers.is_empty() {
        let served = served_versions(h, f);
        format!(
            "no live worker serves {} v{}{}",
            h.workflow,
            h.workflow_version,
            if served.is_empty() {
                " (no live worker serves this workflow at all)".to_owned()
            } else {
                format!(" (live workers serve {})", served.join(", "))
            }
        )
    } else {
        format!(
            "{} live worker(s) serve {} v{}: {}",
            servers.len(),
            h.workflow,
            h.workflow_version,
            servers.iter().map(|s| s.worker.as_str()).collect::<Vec<_>>().join(", ")
        )
    }
}

/// The fleet as the diagnosis of run `h` sees it.
pub(super) fn fleet<'a>(h: &RunHeader, f: &'a Facts) -> Fleet<'a> {
    let silent = f.workers.iter().filter(|w| is_gone(w, f)).collect();
    let servers: Vec<Server> = live(f)
        .filter(|w| w.serves(&h.workflow, h.workflow_version))
        .map(|w| server(h, w))
        .collect();
    let servers_text = servers_text(h, f, &servers);
    Fleet {
        silent,
        servers,
        servers_text,
    }
}

/// What a `/healthz` probe answered, as the lease holder shows it.
fn healthz_text(probe: Option<&Result<(), super::ProbeError>>) -> String {
    match probe {
        Some(Ok(())) => "ok".to_owned(),
        Some(Err(e)) => format!("unreachable: {e}"),
        None => "not served".to_owned(),
    }
}

/// The lease holder, while the run is running (or a worker holds it).
pub(super) fn lease_holder(h: &RunHeader, f: &Facts) -> Option<LeaseHolder> {
    let owner = h.owner.as_ref().filter(|_| h.status == RunStatus::Running)?;
    let now = f.now;
    let reg = f.workers.iter().find(|w| &w.id == owner);
    let expired = now > h.lease_until;
    let probe = f.health.get(owner);
    let silent = reg.and_then(|w| w.silent_for(now));
    let alive = reg.is_some() && silent.is_none() && !expired && !proves_gone(probe);
    Some(LeaseHolder {
        worker: owner.clone(),
        lease_until: h.lease_until,
        expired,
        registered: reg.is_some(),
        last_heartbeat_at: reg.map(WorkerInfo::last_heartbeat),
        healthz: healthz_text(probe),
        alive,
    })
}

/// The evidence of the lease: who holds it until when, its registration, its `/healthz`.
pub(super) fn lease_evidence(l: &LeaseHolder, now: u64) -> String {
    format!(
        "lease held by {} until {}; registration {}; /healthz {}",
        l.worker,
        when(l.lease_until, now),
        match l.last_heartbeat_at {
            Some(hb) => format!("live, last heartbeat {}", when(hb, now)),
            None => "gone (the worker stopped heartbeating)".into(),
        },
        l.healthz
    )
}

/// The evidence of the workers that are gone, if any.
pub(super) fn silent_evidence(silent: &[&WorkerInfo], f: &Facts) -> Option<String> {
    if silent.is_empty() {
        return None;
    }
    Some(format!(
        "{} registered worker(s) are gone (their registrations expire on their own): {}",
        silent.len(),
        silent
            .iter()
            .map(|w| match (w.silent_for(f.now), f.health.get(&w.id)) {
                (Some(s), _) => format!("{} (no heartbeat for {})", w.id, span(s)),
                (None, Some(Err(e))) => format!("{} (/healthz unreachable: {e})", w.id),
                _ => w.id.clone(),
            })
            .collect::<Vec<_>>()
            .join(", ")
    ))
}

/// The evidence of workers that answer their heartbeats but not the doctor (a network in
/// between).
pub(super) fn unreachable_evidence(f: &Facts) -> Vec<String> {
    live(f)
        .filter_map(|w| match f.health.get(&w.id) {
            Some(Err(e)) => Some(format!(
                "{} heartbeats but its /healthz is unreachable from this scheduler ({e})",
                w.id
            )),
            _ => None,
        })
        .collect()
}
