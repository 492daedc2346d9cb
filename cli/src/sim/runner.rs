use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use super::simulate::simulate;
use super::workload;

/// Options of one simulation.
#[derive(Debug, Clone, clap::Args)]
pub struct SimArgs {
    /// Number of seeds to run (from `--seed`, or from 1).
    #[arg(long, default_value_t = 100)]
    pub seeds: u64,
    /// First seed (with `--seeds 1`: exactly this seed).
    #[arg(long)]
    pub seed: Option<u64>,
    /// Runs started per seed.
    #[arg(long, default_value_t = 12)]
    pub runs: usize,
    /// Workers per seed.
    #[arg(long, default_value_t = 3)]
    pub workers: usize,
    /// Length of the chaos phase (virtual ms).
    #[arg(long, default_value_t = 6000)]
    pub chaos_ms: u64,
    /// Threads running seeds in parallel (default: available cores).
    #[arg(long)]
    pub jobs: Option<usize>,
    /// Print each seed's trace (the timeline of faults and actions).
    #[arg(long)]
    pub verbose: bool,
    /// Checks the checker: the `order` workflow charges inside a plain step (at least once,
    /// no idempotency key), so crashes must show up as double charges.
    #[arg(long, hide = true)]
    pub unguarded: bool,
    /// Checks the checker: workers never give back what a busy worker holds
    /// (`worker.hand_back_ms = 0`), so the busy-worker phase must see a task starve.
    #[arg(long, hide = true)]
    pub no_hand_back: bool,
    /// Report, after the seeds, which lines of each Lua script of the store they reached
    /// (and which lines holding code they never did).
    #[arg(long)]
    pub lua_coverage: bool,
}

impl SimArgs {
    /// Defaults for `n` seeds from `first`.
    pub fn seeds(first: u64, n: u64) -> Self {
        Self {
            seeds: n,
            seed: Some(first),
            runs: 12,
            workers: 3,
            chaos_ms: 6000,
            jobs: Some(1),
            verbose: false,
            unguarded: false,
            no_hand_back: false,
            lua_coverage: false,
        }
    }
}

/// What one seed did.
#[derive(Debug, Clone)]
pub struct SeedReport {
    /// The seed.
    pub seed: u64,
    /// Hash of the whole trace (equal on every run of the same seed).
    pub trace_hash: u64,
    /// Invariant violations (empty: the seed passed).
    pub violations: Vec<String>,
    /// The trace lines.
    pub trace: Vec<String>,
    /// Counters: faults injected, crashes, runs by end state…
    pub stats: BTreeMap<String, u64>,
}

/// Runs one seed to its report (on this thread).
pub fn run_seed(seed: u64, args: &SimArgs) -> SeedReport {
    savepoint_core::entropy::seed_thread(seed);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build();
    let report = match rt {
        Ok(rt) => rt.block_on(simulate(seed, args)),
        Err(e) => SeedReport {
            seed,
            trace_hash: 0,
            violations: vec![format!("cannot build a runtime: {e}")],
            trace: vec![],
            stats: BTreeMap::new(),
        },
    };
    savepoint_core::entropy::unseed_thread();
    report
}

/// Runs the seeds of `args`, printing failures (and every trace with `--verbose`); returns
/// the failing reports.
pub fn run(args: &SimArgs) -> Vec<SeedReport> {
    quiet_planted_bugs();
    if args.lua_coverage {
        savepoint_store::mem::coverage::enable();
    }
    let first = args.seed.unwrap_or(1);
    let jobs = args
        .jobs
        .unwrap_or_else(|| std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1))
        .max(1);
    let next = Arc::new(AtomicU64::new(first));
    let end = first.saturating_add(args.seeds);
    let totals: Arc<Mutex<BTreeMap<String, u64>>> = Arc::default();
    let failed: Arc<Mutex<Vec<SeedReport>>> = Arc::default();
    // Real time, on purpose: how long the seeds took on this machine.
    #[allow(clippy::disallowed_methods)]
    let started = std::time::Instant::now();
    let handles: Vec<_> = (0..jobs)
        .map(|_| {
            let (next, totals, failed, args) = (next.clone(), totals.clone(), failed.clone(), args.clone());
            std::thread::spawn(move || loop {
                let seed = next.fetch_add(1, Ordering::Relaxed);
                if seed >= end {
                    return;
                }
                let r = run_seed(seed, &args);
                if args.verbose {
                    for l in &r.trace {
                        println!("seed {seed} {l}");
                    }
                }
                if let Ok(mut t) = totals.lock() {
                    for (k, v) in &r.stats {
                        *t.entry(k.clone()).or_default() += v;
                    }
                    *t.entry("seeds".into()).or_default() += 1;
                }
                if !r.violations.is_empty() {
                    println!("FAILED seed {seed} (trace {:016x}):", r.trace_hash);
                    for v in &r.violations {
                        println!("  {v}");
                    }
                    println!("  reproduce: savepoint sim --seeds 1 --seed {seed} --verbose");
                    if let Ok(mut f) = failed.lock() {
                        f.push(r);
                    }
                }
            })
        })
        .collect();
    for h in handles {
        let _ = h.join();
    }
    let failed = failed.lock().map(|f| f.clone()).unwrap_or_default();
    let totals = totals.lock().map(|t| t.clone()).unwrap_or_default();
    let secs = started.elapsed().as_secs_f64();
    let n = totals.get("seeds").copied().unwrap_or(0);
    println!(
        "sim: {n} seeds from {first} in {secs:.1} s ({:.1} ms/seed, {jobs} thread(s)): {} failed",
        secs * 1000.0 / n.max(1) as f64,
        failed.len()
    );
    let summary: Vec<String> = totals
        .iter()
        .filter(|(k, _)| *k != "seeds")
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    println!("sim: {}", summary.join(" "));
    print_slice_starts();
    if args.lua_coverage {
        print_lua_coverage();
    }
    failed
}

/// How the workers' slices began, over all seeds (the workers' metrics are the process's).
fn print_slice_starts() {
    let resumes = &savepoint_core::metrics::metrics().resumes;
    let read = |how: &str| {
        resumes
            .get_or_create(&savepoint_core::metrics::labels(&[("read", how)]))
            .get()
    };
    println!(
        "sim: slices by how they began (all seeds): parked body {}, held journal {}, whole journal {}",
        read("parked"),
        read("held"),
        read("whole")
    );
}

/// The `--lua-coverage` table: per script, lines of code reached, and the ones never reached.
pub(super) fn print_lua_coverage() {
    let report = match savepoint_store::mem::coverage::report() {
        Ok(r) => r,
        Err(e) => return println!("lua coverage: {e}"),
    };
    let (mut lines, mut hit) = (0, 0);
    println!("lua coverage (lines of code reached / lines of code; never reached):");
    for s in &report {
        lines += s.lines.len();
        hit += s.hit.len();
        let pct = 100.0 * s.hit.len() as f64 / s.lines.len().max(1) as f64;
        let missed = ranges(&s.missed());
        println!(
            "  {:<16} {:>4}/{:<4} {pct:>5.1}%  {}",
            s.name,
            s.hit.len(),
            s.lines.len(),
            if missed.is_empty() { "-".to_owned() } else { missed }
        );
    }
    println!(
        "  {:<16} {hit:>4}/{lines:<4} {:>5.1}%",
        "all",
        100.0 * hit as f64 / lines.max(1) as f64
    );
}

/// `1-3,7,9-10` for [1, 2, 3, 7, 9, 10].
pub(super) fn ranges(lines: &[u32]) -> String {
    let mut out: Vec<String> = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let mut j = i;
        while j + 1 < lines.len() && lines[j + 1] == lines[j] + 1 {
            j += 1;
        }
        out.push(if i == j {
            lines[i].to_string()
        } else {
            format!("{}-{}", lines[i], lines[j])
        });
        i = j + 1;
    }
    out.join(",")
}

/// The planted bug's panics are the workload's (its runs block, and the operator retries
/// them), not the simulator's: they are not printed. Every other panic is.
pub(super) fn quiet_planted_bugs() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let default = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let p = info.payload();
            let msg = (p.downcast_ref::<String>().map(String::as_str))
                .or_else(|| p.downcast_ref::<&str>().copied())
                .unwrap_or("");
            if !msg.starts_with(workload::PLANTED_BUG) {
                default(info);
            }
        }));
    });
}
