//! The pause the simulator takes in the middle of the chaos (invariant 14): the `order`
//! workflow is paused from 30 % to 60 % of the chaos phase, through the API like an operator,
//! with its timers held on odd seeds and kept on even ones. A claim is the only way a slice
//! starts, and `claim.lua` records every successful one as a `claimed` or `takeover` event with
//! the store's time; so no run of the workflow may have such an event between the pause's
//! answer and the resume's request. (Slices in flight at the pause finish their call and
//! yield: they claimed before it.) Every run it stopped must then end like any other
//! (invariants 1–2).

use axum::http::Method;
use savepoint_core::ids::ThreadId;
use savepoint_store::RunStatus;
use serde_json::{json, Value};

use super::world::{Kind, World};

/// The workflow paused.
const PAUSED: &str = "order";

/// The statuses a run the pause holds can have: stopped, or not yet (its next claim stops it).
const HELD: [RunStatus; 5] = [
    RunStatus::Paused,
    RunStatus::Pending,
    RunStatus::Sleeping,
    RunStatus::Waiting,
    RunStatus::Running,
];

/// The pause's window in store time, as the driver saw it answered and asked lifted.
#[derive(Default)]
pub(super) struct Pausing {
    /// Hold the timers of the runs it stops (odd seeds) or keep them.
    hold: bool,
    /// Store time once the pause had answered (every claim after it is stopped).
    from: Option<u64>,
    /// Store time just before the resume was first asked for (a try the store's faults broke
    /// may have lifted part of it).
    until: Option<u64>,
    /// The resume answered.
    resumed: bool,
    /// The statuses of [`HELD`] whose listing by waiting cause was read while the pause held
    /// (invariant 15).
    sampled: usize,
    /// What that reading found wrong.
    found: Vec<String>,
}

impl Pausing {
    /// The seed's pause: timers held on odd seeds.
    pub(super) fn new(seed: u64) -> Self {
        Self {
            hold: seed % 2 == 1,
            ..Self::default()
        }
    }

    /// Pauses once 30 % of the chaos has passed, resumes at 60 % (a call the store's faults
    /// refused is tried again on the next tick: both are idempotent).
    pub(super) async fn drive(&mut self, w: &World, now: u64, chaos_ms: u64) {
        if self.from.is_none() && now >= chaos_ms * 3 / 10 {
            let body = json!({"workflow": PAUSED, "note": "simulated incident", "hold_timers": self.hold});
            let (code, reply) = w.api(Method::POST, "/v1/pauses", Some(body)).await;
            if code == 200 {
                // (+1: a claim in the same millisecond may have run just before the pause.)
                self.from = Some(w.server_ms() + 1);
                w.trace.count("pause.paused");
                w.trace.line(now, format!("pause: workflow {PAUSED} paused ({reply})"));
            }
        } else if self.from.is_some() && !self.resumed && now >= chaos_ms * 6 / 10 {
            self.until.get_or_insert(w.server_ms());
            let body = json!({"workflow": PAUSED, "note": "incident over"});
            let (code, reply) = w.api(Method::POST, "/v1/pauses/resume", Some(body)).await;
            // (404: an earlier try lifted it and its answer was lost.)
            if code == 200 || code == 404 {
                self.resumed = true;
                w.trace.line(now, format!("pause: workflow {PAUSED} resumed ({reply})"));
            }
        }
    }

    /// Invariant 15, while the pause holds (from 35 % of the chaos): for each status a held
    /// run can have, `GET /v1/runs?waiting_on=paused&status=S` lists every run of the paused
    /// workflow that had status S both before and after the listing, each saying it waits on
    /// the pause, and no run of another workflow. One status a tick; a listing the store's
    /// faults broke is asked again on the next.
    pub(super) async fn sample(
        &mut self,
        w: &World,
        now: u64,
        chaos_ms: u64,
        runs: &[(ThreadId, Value, u64)],
        kinds: &[Kind],
    ) {
        let Some(status) = HELD.get(self.sampled) else { return };
        if self.from.is_none() || self.until.is_some() || now < chaos_ms * 35 / 100 {
            return;
        }
        let order: Vec<&ThreadId> = runs
            .iter()
            .zip(kinds)
            .filter(|(_, k)| **k == Kind::Order)
            .map(|((t, _, _), _)| t)
            .collect();
        let Some(before) = of_status(w, &order, *status).await else {
            return;
        };
        let path = format!("/v1/runs?waiting_on=paused&status={status}&limit=1000");
        let (code, list) = w.api(Method::GET, &path, None).await;
        let Some(after) = of_status(w, &order, *status).await.filter(|_| code == 200) else {
            return;
        };
        self.sampled += 1;
        w.trace.count(&format!("waiting.sampled.{status}"));
        let listed: Vec<&Value> = list["runs"].as_array().map(|a| a.iter().collect()).unwrap_or_default();
        w.trace.count_by("waiting.paused_listed", listed.len() as u64);
        for r in &listed {
            if r["workflow"] != PAUSED || r["waiting"]["on"] != "paused" || r["status"] != status.as_str() {
                self.found
                    .push(format!("listed as {status} and held by the {PAUSED} pause: {r}"));
            }
        }
        for t in order.iter().filter(|t| before.contains(t) && after.contains(t)) {
            if !listed.iter().any(|r| r["thread_id"] == t.as_str()) {
                self.found.push(format!(
                    "{t} ({PAUSED}, {status} while its workflow was paused) does not say it waits on the pause"
                ));
            }
        }
    }

    /// Invariant 14: no run of the paused workflow was claimed while it was paused.
    pub(super) async fn check(&self, w: &World, runs: &[(ThreadId, Value, u64)], kinds: &[Kind], v: &mut Vec<String>) {
        v.extend(self.found.iter().cloned());
        let (Some(from), Some(until)) = (self.from, self.until.filter(|_| self.resumed)) else {
            if self.from.is_some() {
                v.push(format!("the {PAUSED} pause was never lifted"));
            }
            return;
        };
        for ((t, _, _), kind) in runs.iter().zip(kinds) {
            if *kind != Kind::Order {
                continue;
            }
            let Ok(events) = w.store.events(t, 10_000).await else {
                continue;
            };
            for e in events.iter().filter(|e| e.typ == "claimed" || e.typ == "takeover") {
                if (from..until).contains(&e.at) {
                    v.push(format!(
                        "{t} ({PAUSED}) was {} at {} while its workflow was paused ({from}..{until})",
                        e.typ, e.at
                    ));
                }
            }
            if events.iter().any(|e| e.typ == "paused") {
                w.trace.count("pause.stopped_runs");
            }
        }
    }
}

/// The runs of `threads` with status `status` now; `None` when the store's faults broke a
/// read (each is tried a few times).
async fn of_status<'a>(w: &World, threads: &[&'a ThreadId], status: RunStatus) -> Option<Vec<&'a ThreadId>> {
    let mut found = Vec::new();
    for t in threads {
        let mut read = None;
        for _ in 0..8 {
            if let Ok(h) = w.store.header(t).await {
                read = Some(h);
                break;
            }
        }
        if read?.is_some_and(|h| h.status == status) {
            found.push(*t);
        }
    }
    Some(found)
}
