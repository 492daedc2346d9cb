//! Figures of a load run: percentiles and the report.

use serde::Serialize;
use std::collections::BTreeMap;

/// p50/p90/p99/max of a sample, in milliseconds.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct Percentiles {
    /// Samples.
    pub n: usize,
    /// Median.
    pub p50: f64,
    /// 90th percentile.
    pub p90: f64,
    /// 99th percentile.
    pub p99: f64,
    /// Largest.
    pub max: f64,
}

impl Percentiles {
    /// Nearest-rank percentiles of `v` (any order).
    pub fn of(mut v: Vec<f64>) -> Self {
        if v.is_empty() {
            return Self::default();
        }
        v.sort_by(|a, b| a.total_cmp(b));
        let rank = |p: f64| v[((p / 100.0 * v.len() as f64).ceil() as usize).clamp(1, v.len()) - 1];
        Self {
            n: v.len(),
            p50: rank(50.0),
            p90: rank(90.0),
            p99: rank(99.0),
            max: v[v.len() - 1],
        }
    }
}

/// Everything `savepoint loadgen` measured.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Report {
    /// Workflow run.
    pub workflow: String,
    /// Runs submitted.
    pub runs: usize,
    /// From the first run's creation to the last run's end (server clock), seconds.
    pub wall_s: f64,
    /// Journal entries committed by the finished runs.
    pub steps: u64,
    /// `steps / wall_s`.
    pub steps_per_s: f64,
    /// `runs / wall_s`.
    pub runs_per_s: f64,
    /// Run latency: created → finished (ms).
    pub run_latency_ms: Percentiles,
    /// Time between consecutive journal entries of a sample of runs (ms).
    pub step_latency_ms: Percentiles,
    /// Runs by final status (`unfinished` = not ended when the wait timed out).
    pub by_status: BTreeMap<String, usize>,
    /// Effect calls recorded in the demo effects log, per key, where a key was called more than once.
    pub repeated_effect_calls: BTreeMap<String, u32>,
    /// Webhook deliveries per key, where a key was delivered more than once.
    pub repeated_deliveries: BTreeMap<String, u32>,
    /// Distinct effect keys called.
    pub effect_keys: usize,
    /// Mean Redis bytes of one finished run (MEMORY USAGE of its hash, events and signals).
    pub redis_bytes_per_run: f64,
    /// Stalls a takeover ended: last progress before a lease expired → the takeover (ms).
    pub recovery_ms: Percentiles,
    /// Runs not ended and not blocked when the wait ended.
    pub lost: usize,
}

fn line(name: &str, p: &Percentiles) -> String {
    format!(
        "{name:<22} p50 {:>8.1}  p90 {:>8.1}  p99 {:>8.1}  max {:>8.1}  (n={})",
        p.p50, p.p90, p.p99, p.max, p.n
    )
}

impl Report {
    /// Human-readable text.
    pub fn render(&self) -> String {
        let mut s = String::new();
        s.push_str(&format!(
            "workflow               {}  ({} runs)\n",
            self.workflow, self.runs
        ));
        s.push_str(&format!("wall time              {:.2} s\n", self.wall_s));
        s.push_str(&format!(
            "steps                  {}  ({:.0} steps/s)\n",
            self.steps, self.steps_per_s
        ));
        s.push_str(&format!("runs/s                 {:.1}\n", self.runs_per_s));
        s.push_str(&line("run latency ms", &self.run_latency_ms));
        s.push('\n');
        s.push_str(&line("step latency ms", &self.step_latency_ms));
        s.push('\n');
        let statuses: Vec<String> = self.by_status.iter().map(|(k, v)| format!("{k}={v}")).collect();
        s.push_str(&format!("runs by status         {}\n", statuses.join(" ")));
        s.push_str(&format!(
            "effect keys            {} called; repeated calls: {}\n",
            self.effect_keys,
            self.repeated_effect_calls.len()
        ));
        for (k, n) in &self.repeated_effect_calls {
            s.push_str(&format!("  called {n}x: {k}\n"));
        }
        if !self.repeated_deliveries.is_empty() {
            s.push_str(&format!(
                "DELIVERED TWICE        {} keys\n",
                self.repeated_deliveries.len()
            ));
            for (k, n) in &self.repeated_deliveries {
                s.push_str(&format!("  delivered {n}x: {k}\n"));
            }
        }
        s.push_str(&format!("redis bytes per run    {:.0}\n", self.redis_bytes_per_run));
        if self.recovery_ms.n > 0 {
            s.push_str(&line("recovery ms", &self.recovery_ms));
            s.push('\n');
        }
        s.push_str(&format!("lost runs              {}\n", self.lost));
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let p = Percentiles::of((1..=100).map(f64::from).collect());
        assert_eq!((p.p50, p.p90, p.p99, p.max, p.n), (50.0, 90.0, 99.0, 100.0, 100));
        assert_eq!(Percentiles::of(vec![]).n, 0);
        assert_eq!(Percentiles::of(vec![7.0]).p99, 7.0);
    }
}
