//! The options of `savepoint loadgen`.

/// Options of `savepoint loadgen`.
#[derive(Debug, Clone, clap::Args)]
pub struct LoadgenArgs {
    /// TOML config file (for the namespace and Redis URL; default: $SAVEPOINT_CONFIG).
    #[arg(long)]
    pub config: Option<String>,
    /// Workflow to run: chain, webhook or invoice.
    #[arg(long, default_value = "chain")]
    pub workflow: String,
    /// Runs to submit.
    #[arg(long, default_value_t = 500)]
    pub runs: usize,
    /// Steps per run (chain, webhook).
    #[arg(long, default_value_t = 10)]
    pub steps: u32,
    /// Padding bytes per step result (chain).
    #[arg(long, default_value_t = 0)]
    pub payload_bytes: usize,
    /// A durable sleep of this many ms after each step (chain; 0: none).
    #[arg(long, default_value_t = 0)]
    pub nap_ms: u64,
    /// Runs per second to submit; 0 submits all at once.
    #[arg(long, default_value_t = 0.0)]
    pub rate: f64,
    /// Most runs in flight at once.
    #[arg(long, default_value_t = 5000)]
    pub inflight: usize,
    /// Index of the webhook effect (default: the middle step).
    #[arg(long)]
    pub effect_at: Option<u32>,
    /// Webhook in-doubt policy: block or retry_safe.
    #[arg(long, default_value = "block")]
    pub policy: String,
    /// Webhook URL (default: a receiver started by the load generator, counting deliveries).
    #[arg(long)]
    pub webhook_url: Option<String>,
    /// Seconds to wait for all runs to end.
    #[arg(long, default_value_t = 300)]
    pub timeout: u64,
    /// Put the runs under flow control, spread over this many keys (`lg0`, `lg1`, …; run i
    /// takes key i mod N); 0: no flow control.
    #[arg(long, default_value_t = 0)]
    pub flow_keys: usize,
    /// Runs of one flow key running at once (with `--flow-keys`).
    #[arg(long, default_value_t = 4)]
    pub flow_limit: u32,
    /// Runs sampled for per-step latency and Redis bytes.
    #[arg(long, default_value_t = 200)]
    pub sample: usize,
}
