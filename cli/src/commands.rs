//! The `savepoint` command-line tool: a client of the scheduler's HTTP API.
//!
//! Adding a subcommand: add a variant to [`Command`] (with its own `Args` struct if it has
//! options) and an arm in [`execute`]. Subcommands that talk to the API use [`ApiClient`];
//! others (`dev`, `loadgen`) get the global options from [`Cli`].

pub use savepoint_client::{ApiClient, ClientError, DEFAULT_API};

use crate::render;

use anyhow::Context;
use clap::{ArgAction, Args, Parser, Subcommand};
use serde_json::Value;
use std::process::ExitCode;
use std::time::Duration;
use tokio::time::Instant;

/// Savepoint: durable workflows over RabbitMQ and Redis.
#[derive(Debug, Parser)]
#[command(name = "savepoint", version, about)]
pub struct Cli {
    /// Base URL of the scheduler API.
    #[arg(long, global = true, env = "SAVEPOINT_API", default_value = DEFAULT_API)]
    pub api: String,
    /// API token (`Authorization: Bearer`), when the scheduler requires one. Prefer the
    /// environment variable: a flag is visible to other users in the process list.
    #[arg(long, global = true, env = "SAVEPOINT_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// Print the raw JSON answer instead of readable text.
    #[arg(long, global = true)]
    pub json: bool,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Start a run of a workflow.
    Start(StartArgs),
    /// Show a run: status, step, what it waits for, output or error.
    Get {
        /// Thread id of the run.
        thread: String,
    },
    /// Explain why a run is or is not progressing, with the evidence and the command that
    /// settles it (`GET /v1/runs/{thread}/diagnosis`).
    Doctor {
        /// Thread id of the run.
        thread: String,
    },
    /// Show a run's journal entries and events.
    History {
        /// Thread id of the run.
        thread: String,
    },
    /// Print a run's checkpoint as JSON (always JSON).
    Export {
        /// Thread id of the run.
        thread: String,
    },
    /// Answer the interrupt a run is waiting on.
    Resume {
        /// Thread id of the run.
        thread: String,
        /// The answer, as JSON (e.g. `true`, `'"text"'`, `'{"ok":1}'`).
        value: String,
        /// Client id: a retried call with the same id is delivered once.
        #[arg(long)]
        id: Option<String>,
    },
    /// Send a named signal to a run (buffered if it is not waiting for it yet).
    Signal {
        /// Thread id of the run.
        thread: String,
        /// Signal name (1-64 characters of A-Z a-z 0-9 _ . -).
        name: String,
        /// The value, as JSON.
        value: String,
        /// Client id: a retried call with the same id is delivered once.
        #[arg(long)]
        id: Option<String>,
    },
    /// Cancel a run that has not ended.
    Cancel {
        /// Thread id of the run.
        thread: String,
        /// Why (recorded in the run's events).
        #[arg(long)]
        reason: Option<String>,
    },
    /// Re-queue a blocked run after a fix (code deployed, version served again): the worker
    /// checks it again from the top. Runs blocked on an in-doubt effect are resolved instead.
    Retry {
        /// Thread id of the blocked run.
        thread: String,
    },
    /// Let a run go of a value feature no build names (`value:<type>@<version>`, as its
    /// waiting_for says): a versioned type renamed or dropped without `Versioned::FORMERLY`.
    /// The next worker upgrades the value as its own type from the recorded version, or blocks
    /// the run on one it cannot decode. Needs the admin role (README §10 says when it is safe).
    ForgetFeature {
        /// Thread id of the run.
        thread: String,
        /// The feature, e.g. `value:billing.Invoice@2`.
        feature: String,
    },
    /// Say which version a child's output was written at (`<type>@<version>`), for a child an
    /// older build completed without one: its parent blocks on it rather than guess, naming
    /// the call (README §10). Then `savepoint retry <parent>`. Needs the admin role.
    OutputVersion(OutputVersionArgs),
    /// Fork a run from a journal entry into a new run (time travel): the new run starts with
    /// the source's first N entries and goes on from there. Needs the admin role.
    Fork {
        /// Thread id of the source run.
        thread: String,
        /// How many of the source's entries the new run starts with.
        #[arg(long)]
        from_step: u32,
        /// The new run's id (generated when absent).
        #[arg(long)]
        thread_id: Option<String>,
        /// An effect key the source settled at or after the entry to perform again (repeat
        /// the flag for several); by default a settled key is never repeated.
        #[arg(long = "rerun-effect", value_name = "KEY")]
        rerun_effects: Vec<String>,
    },
    /// Re-run a failed, blocked or cancelled run in place from a journal entry: entries
    /// before it are kept, the rest dropped. Needs the admin role.
    Restart {
        /// Thread id of the run.
        thread: String,
        /// The entry to go on from.
        #[arg(long)]
        from_step: u32,
        /// An effect key the run settled at or after the entry to perform again (repeatable).
        #[arg(long = "rerun-effect", value_name = "KEY")]
        rerun_effects: Vec<String>,
    },
    /// Schedules: start runs of a workflow on a cron pattern or a fixed interval.
    #[command(subcommand)]
    Schedule(ScheduleCommand),
    /// Settle the in-doubt effect a blocked run waits on, and let it continue.
    Resolve(ResolveArgs),
    /// Run a scheduler and two workers in one process against the configured RabbitMQ and
    /// Redis; by default first play the seed's invoice story (crash after the ledger post,
    /// resume on the other worker, count every effect).
    Dev(DevCmd),
    /// Load generator: submit runs, wait for them, print throughput, latency, duplicates,
    /// Redis bytes per run; non-zero exit when a run is lost or an effect repeated.
    Loadgen(crate::loadgen::LoadgenArgs),
    /// Deterministic simulation: the real API, scanners and workers on the embedded backend
    /// under seeded faults and virtual time; prints failing seeds; non-zero exit on any.
    Sim(crate::sim::SimArgs),
    /// Wait until a run has ended (completed, failed, cancelled) or is blocked, then print it.
    /// Exit code by status: 0 completed, 3 failed, 4 cancelled, 5 blocked, 6 still going when
    /// `--timeout` passed.
    Wait {
        /// Thread id of the run.
        thread: String,
        /// Give up after this many seconds (default: wait as long as it takes).
        #[arg(long)]
        timeout: Option<f64>,
    },
    /// Print the API's OpenAPI 3.1 document (as served at /openapi.json), or write it to a
    /// file (`--out docs/openapi.json` refreshes the committed copy).
    Openapi {
        /// Write it here instead of standard output.
        #[arg(long)]
        out: Option<std::path::PathBuf>,
        /// The body size limit to state (default: the configured `scheduler.max_input_bytes`).
        #[arg(long)]
        max_body: Option<usize>,
    },
    /// API tokens: `token new --name NAME --role read|operate|admin` prints a new token and
    /// the line to configure (only its SHA-256 digest is configured); `token hash` prints the
    /// digest line of a token read from standard input.
    #[command(subcommand)]
    Token(TokenCmd),
    /// Payload keys: `key new --id ID` prints a new 32-byte key entry for
    /// SAVEPOINT_PAYLOAD_KEYS (put it first to seal with it; keep the old ones after it).
    #[command(subcommand)]
    Key(KeyCmd),
    /// Pause a run (`pause RUN`), a workflow (`--workflow W [--version N]`), a task queue
    /// (`--queue Q`) or every run a filter matches (`--filter [--workflow W] [--status S]
    /// [--prefix P]`): it takes no new slice until unpaused; a slice in flight finishes its
    /// call and yields.
    Pause(PauseArgs),
    /// Lift a pause (the same targets as `pause`) and put back the runs it stopped;
    /// `--to-version N` moves them to that version of their workflow.
    Unpause(PauseArgs),
    /// The workflow, version and queue pauses in force and the runs they stopped.
    Pauses,
    /// The live workers: what each serves, its queues, runs in flight, steps and last
    /// heartbeat (`GET /v1/workers`).
    Workers,
    /// The workflows live workers serve: versions, workers, queues and runs by status
    /// (`GET /v1/workflows`; `--json` adds each version's published schemas).
    Workflows,
    /// List recent runs, newest first.
    List {
        /// Only runs with this status (pending, running, sleeping, waiting, completed, failed,
        /// cancelled, blocked).
        #[arg(long)]
        status: Option<String>,
        /// At most this many (1-1000, default 50).
        #[arg(long)]
        limit: Option<u32>,
        /// Only runs waiting on this cause, each shown with why and until when (human,
        /// signal, child, timer, flow_slot, rate_limit, worker, backlog, paused, backing_off,
        /// blocked).
        #[arg(long)]
        waiting_on: Option<String>,
    },
}

/// `savepoint token …`.
#[derive(Debug, Subcommand)]
pub enum TokenCmd {
    /// A new random token for NAME with ROLE.
    New {
        /// Who holds it (recorded in the run's events for each action it takes).
        #[arg(long)]
        name: String,
        /// read, operate or admin.
        #[arg(long)]
        role: String,
    },
    /// The configuration line of an existing token read from standard input.
    Hash {
        /// Who holds it.
        #[arg(long)]
        name: String,
        /// read, operate or admin.
        #[arg(long)]
        role: String,
    },
}

/// `savepoint key …`.
#[derive(Debug, Subcommand)]
pub enum KeyCmd {
    /// A new payload key entry `ID:base64`.
    New {
        /// The key's id (1-32 characters of A-Z a-z 0-9 _ - .), e.g. the month it was made.
        #[arg(long)]
        id: String,
    },
}

/// Arguments of `savepoint dev`.
#[derive(Debug, Args)]
pub struct DevCmd {
    /// TOML config file (default: $SAVEPOINT_CONFIG, else built-in defaults).
    #[arg(long)]
    pub config: Option<String>,
    /// Story and serving options.
    #[command(flatten)]
    pub dev: crate::dev::DevArgs,
}

/// Arguments of `savepoint output-version`.
#[derive(Debug, Args)]
pub struct OutputVersionArgs {
    /// Thread id of the parent run (the one blocked).
    pub thread: String,
    /// The journal index of its child call, as the block reason names it.
    pub call: u32,
    /// The version, e.g. `billing.Price@2` (`@1`: the child's build declared none).
    pub version: String,
}

/// Arguments of `savepoint start`.
#[derive(Debug, Args)]
pub struct StartArgs {
    /// Workflow name (as registered by the workers).
    pub workflow: String,
    /// Input, as JSON.
    #[arg(long)]
    pub input: Option<String>,
    /// Thread id to use (starting twice with the same id, workflow and input is idempotent).
    #[arg(long)]
    pub thread_id: Option<String>,
    /// The run's timeout (e.g. `90s`, `30m`, `2h`, `7d`): it fails if it has not ended by then.
    #[arg(long, value_parser = parse_duration)]
    pub timeout: Option<std::time::Duration>,
}

/// A duration argument that does not read as `<n>ms|s|m|h|d`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DurationArgError {
    /// No whole number leads it.
    NotANumber(String),
    /// The unit is none of `ms`, `s`, `m`, `h`, `d` (unit, argument).
    UnknownUnit(String, String),
}

impl std::fmt::Display for DurationArgError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::NotANumber(s) => write!(f, "{s:?} is not a duration like 90s, 30m, 2h or 7d"),
            Self::UnknownUnit(unit, s) => write!(f, "unknown unit {unit:?} in {s:?} (use ms, s, m, h or d)"),
        }
    }
}

impl std::error::Error for DurationArgError {}

/// A duration as `<n>ms|s|m|h|d` (seconds without a unit).
fn parse_duration(s: &str) -> Result<std::time::Duration, DurationArgError> {
    let s = s.trim();
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (n, unit) = s.split_at(split);
    let n: u64 = n.parse().map_err(|_| DurationArgError::NotANumber(s.to_owned()))?;
    let ms = match unit {
        "ms" => n,
        "" | "s" => n * 1000,
        "m" => n * 60_000,
        "h" => n * 3_600_000,
        "d" => n * 86_400_000,
        other => return Err(DurationArgError::UnknownUnit(other.to_owned(), s.to_owned())),
    };
    Ok(std::time::Duration::from_millis(ms))
}

/// `savepoint schedule …`.
#[derive(Debug, Subcommand)]
pub enum ScheduleCommand {
    /// Create a schedule (the same one again changes nothing).
    Create {
        /// The schedule's id (1-64 characters of A-Z a-z 0-9 _ . -).
        id: String,
        /// The workflow each firing starts.
        #[arg(long)]
        workflow: String,
        /// The input of every run, as JSON.
        #[arg(long)]
        input: Option<String>,
        /// A cron pattern (5 fields, or 6 with seconds first), e.g. "0 30 9 * * MON-FRI".
        #[arg(long, conflicts_with = "every")]
        cron: Option<String>,
        /// A fixed interval (e.g. 30s, 15m, 1h).
        #[arg(long, value_parser = parse_duration)]
        every: Option<std::time::Duration>,
        /// The IANA time zone of the cron pattern (default UTC).
        #[arg(long)]
        timezone: Option<String>,
        /// skip | buffer_one | allow_all | cancel_previous (default skip).
        #[arg(long)]
        overlap: Option<String>,
        /// latest | all | none: firings missed by more than the catch-up window (default latest).
        #[arg(long)]
        catchup: Option<String>,
        /// With --catchup all: the most missed firings started (default 10).
        #[arg(long)]
        catchup_limit: Option<u32>,
        /// Each run's timeout (e.g. 30m).
        #[arg(long, value_parser = parse_duration)]
        timeout: Option<std::time::Duration>,
    },
    /// List schedules.
    List,
    /// Show a schedule: its timing, next firings, last run and counts.
    Get {
        /// The schedule's id.
        id: String,
    },
    /// Pause a schedule (firings missed while paused are not made up).
    Pause {
        /// The schedule's id.
        id: String,
        /// Why (shown with the schedule).
        #[arg(long)]
        note: Option<String>,
    },
    /// Resume a paused schedule from its next firing.
    Resume {
        /// The schedule's id.
        id: String,
    },
    /// Start one run of the schedule now.
    Trigger {
        /// The schedule's id.
        id: String,
    },
    /// Delete a schedule (its runs are not touched).
    Delete {
        /// The schedule's id.
        id: String,
    },
}

/// Arguments of `savepoint pause` and `savepoint unpause`.
#[derive(Debug, Args)]
pub struct PauseArgs {
    /// Thread id of one run (or name a workflow, a queue or a filter instead).
    pub thread: Option<String>,
    /// Every run of this workflow (with `--filter`: the filter's workflow).
    #[arg(long)]
    pub workflow: Option<String>,
    /// With `--workflow`: only runs of this version.
    #[arg(long)]
    pub version: Option<u32>,
    /// Every run whose next task goes to this task queue.
    #[arg(long)]
    pub queue: Option<String>,
    /// Every run the list filter (`--workflow`, `--status`, `--prefix`) matches now, each on its own.
    #[arg(long)]
    pub filter: bool,
    /// With `--filter`: only runs with this status.
    #[arg(long)]
    pub status: Option<String>,
    /// With `--filter`: only runs whose id starts with this.
    #[arg(long)]
    pub prefix: Option<String>,
    /// Why (recorded with who asked).
    #[arg(long)]
    pub note: Option<String>,
    /// Pause: hold the timers and deadlines of the runs it stops (default: kept).
    #[arg(long)]
    pub hold_timers: bool,
    /// Unpause: move the runs it puts back to this version of their workflow.
    #[arg(long)]
    pub to_version: Option<u32>,
    /// Pause even while a live worker of a build from before pauses would not honour it (the
    /// answer names those workers).
    #[arg(long)]
    pub force: bool,
}

impl PauseArgs {
    /// The request body for a workflow, queue or filter (`None`: one run).
    fn body(&self, resume: bool) -> anyhow::Result<Option<Value>> {
        let mut b = serde_json::Map::new();
        if self.filter {
            let f = serde_json::json!({"workflow": self.workflow, "status": self.status, "prefix": self.prefix});
            b.insert("filter".into(), f);
        } else if let Some(w) = &self.workflow {
            b.insert("workflow".into(), w.clone().into());
            if let Some(v) = self.version {
                b.insert("version".into(), v.into());
            }
        } else if let Some(q) = &self.queue {
            b.insert("queue".into(), q.clone().into());
        } else if self.thread.is_some() {
            return Ok(None);
        } else {
            anyhow::bail!("name a run, --workflow, --queue or --filter");
        }
        if let Some(n) = &self.note {
            b.insert("note".into(), n.clone().into());
        }
        match resume {
            true => {
                if let Some(v) = self.to_version {
                    b.insert("to_version".into(), v.into());
                }
            }
            false => self.pause_options(&mut b),
        }
        // (Absent fields are dropped: the API reads `null` as absent, but the filter's
        // explicit nulls are noise in a request log.)
        if let Some(Value::Object(f)) = b.get_mut("filter") {
            f.retain(|_, v| !v.is_null());
        }
        Ok(Some(Value::Object(b)))
    }

    /// The body of a one-run pause or unpause.
    fn run_body(&self, resume: bool) -> Value {
        let mut b = serde_json::Map::new();
        if let Some(n) = &self.note {
            b.insert("note".into(), n.clone().into());
        }
        if resume {
            if let Some(v) = self.to_version {
                b.insert("to_version".into(), v.into());
            }
        } else {
            self.pause_options(&mut b);
        }
        Value::Object(b)
    }

    /// A pause's `hold_timers` and `force`, when asked for.
    fn pause_options(&self, b: &mut serde_json::Map<String, Value>) {
        if self.hold_timers {
            b.insert("hold_timers".into(), true.into());
        }
        if self.force {
            b.insert("force".into(), true.into());
        }
    }
}

/// `savepoint pause` and `savepoint unpause`.
async fn pause(client: &ApiClient, json: bool, a: PauseArgs, resume: bool) -> anyhow::Result<()> {
    let body = a.body(resume)?;
    let v = match (&a.thread, body, resume) {
        (Some(t), None, false) => client.pause_run(t, Some(&a.run_body(false))).await?,
        (Some(t), None, true) => client.unpause_run(t, Some(&a.run_body(true))).await?,
        (None, Some(b), false) => client.pause(&b).await?,
        (None, Some(b), true) => client.resume_pause(&b).await?,
        _ => anyhow::bail!("name one run, or --workflow, --queue or --filter, not both"),
    };
    print(json, &v, |v| {
        render::paused(if resume { "unpaused" } else { "paused" }, v)
    })
}

/// Arguments of `savepoint resolve`.
#[derive(Debug, Args)]
pub struct ResolveArgs {
    /// Thread id of the blocked run.
    pub thread: String,
    /// The effect's idempotency key.
    #[arg(required_unless_present = "all")]
    pub key: Option<String>,
    /// Whether the effect was applied (true) or is known not to have happened (false).
    #[arg(long, action = ArgAction::Set, required_unless_present = "all")]
    pub applied: Option<bool>,
    /// The effect's result when applied, as JSON.
    #[arg(long)]
    pub result: Option<String>,
    /// Every effect the run has in doubt, settled together, as JSON: each key its diagnosis
    /// lists, `{"<key>": {"applied": true, "result": …}, "<key>": {"applied": false}}`.
    #[arg(long, conflicts_with_all = ["key", "applied", "result"])]
    pub all: Option<String>,
}

/// Parses a JSON argument, with a hint for the common mistake of an unquoted string.
pub fn parse_json_arg(what: &str, raw: &str) -> anyhow::Result<Value> {
    serde_json::from_str(raw)
        .with_context(|| format!("{what} is not valid JSON: {raw:?} (strings need quotes, e.g. '\"yes\"')"))
}

/// A command that ends with this exit code; what it had to say is printed already.
#[derive(Debug)]
pub struct ExitWith(pub u8);

impl std::fmt::Display for ExitWith {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "exit code {}", self.0)
    }
}

impl std::error::Error for ExitWith {}

/// The exit code of `savepoint wait` for a run's status.
fn wait_code(status: &str) -> Option<u8> {
    match status {
        "completed" => Some(0),
        "failed" => Some(3),
        "cancelled" => Some(4),
        "blocked" => Some(5),
        _ => None,
    }
}

/// Runs the CLI: parses arguments, executes, prints; exit code 1 on any error.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(execute(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if e.downcast_ref::<ExitWith>().is_some() => {
            ExitCode::from(e.downcast_ref::<ExitWith>().map_or(1, |x| x.0))
        }
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn print(json: bool, v: &Value, readable: impl FnOnce(&Value) -> String) -> anyhow::Result<()> {
    if json {
        println!("{}", serde_json::to_string_pretty(v)?);
    } else {
        print!("{}", readable(v));
    }
    Ok(())
}

async fn schedule(client: &ApiClient, json: bool, cmd: ScheduleCommand) -> anyhow::Result<()> {
    let (v, what) = match cmd {
        ScheduleCommand::Create {
            id,
            workflow,
            input,
            cron,
            every,
            timezone,
            overlap,
            catchup,
            catchup_limit,
            timeout,
        } => {
            let mut body = serde_json::json!({ "id": id, "workflow": workflow });
            if let Some(i) = input {
                body["input"] = parse_json_arg("input", &i)?;
            }
            let opts = [
                ("cron", cron.map(Value::from)),
                ("every_secs", every.map(|d| Value::from(d.as_secs().max(1)))),
                ("timezone", timezone.map(Value::from)),
                ("overlap", overlap.map(Value::from)),
                ("catchup", catchup.map(Value::from)),
                ("catchup_limit", catchup_limit.map(Value::from)),
                ("timeout_secs", timeout.map(|d| Value::from(d.as_secs().max(1)))),
            ];
            for (k, v) in opts {
                if let Some(v) = v {
                    body[k] = v;
                }
            }
            (client.schedule_create(&body).await?, "created")
        }
        ScheduleCommand::List => {
            let v = client.schedule_get(None).await?;
            return print(json, &v, render::schedules);
        }
        ScheduleCommand::Get { id } => (client.schedule_get(Some(&id)).await?, ""),
        ScheduleCommand::Pause { id, note } => {
            let body = serde_json::json!({ "note": note });
            (client.schedule_action(&id, "pause", Some(&body)).await?, "paused")
        }
        ScheduleCommand::Resume { id } => (client.schedule_action(&id, "resume", None).await?, "resumed"),
        ScheduleCommand::Trigger { id } => {
            let v = client.schedule_action(&id, "trigger", None).await?;
            return print(json, &v, |v| format!("started {}\n", render::text(&v["thread_id"])));
        }
        ScheduleCommand::Delete { id } => {
            client.schedule_action(&id, "delete", None).await?;
            return print(json, &serde_json::json!({ "deleted": id }), |_| {
                format!("deleted {id}\n")
            });
        }
    };
    print(json, &v, |v| {
        let head = if what.is_empty() {
            String::new()
        } else {
            format!("{what}\n")
        };
        head + &render::schedule(v)
    })
}

/// Executes one parsed command line.
pub async fn execute(cli: Cli) -> anyhow::Result<()> {
    let client = ApiClient::new(&cli.api).with_token(cli.token.clone());
    let json = cli.json;
    match cli.command {
        Command::Token(cmd) => token_command(cmd),
        Command::Key(KeyCmd::New { id }) => {
            println!("{}", savepoint_runtime::security::PayloadCodec::new_key_entry(&id)?);
            Ok(())
        }
        Command::Start(a) => start(&client, json, a).await,
        Command::Openapi { out, max_body } => openapi(out, max_body),
        Command::Get { thread } => print(json, &client.get(&thread).await?, render::run),
        Command::Wait { thread, timeout } => wait(&client, json, &thread, timeout).await,
        Command::Doctor { thread } => print(json, &client.diagnosis(&thread).await?, render::diagnosis),
        Command::History { thread } => print(json, &client.history(&thread).await?, render::history),
        Command::Export { thread } => print(true, &client.export(&thread).await?, |_| String::new()),
        Command::Resume { thread, value, id } => {
            let v = client
                .resume(&thread, parse_json_arg("value", &value)?, id.as_deref())
                .await?;
            print(json, &v, |v| render::ack("resumed", v))
        }
        Command::Signal {
            thread,
            name,
            value,
            id,
        } => {
            let v = client
                .signal(&thread, &name, parse_json_arg("value", &value)?, id.as_deref())
                .await?;
            print(json, &v, |v| render::ack(&format!("signal {name} →"), v))
        }
        Command::Retry { thread } => print(json, &client.retry(&thread).await?, |v| render::ack("retry", v)),
        Command::ForgetFeature { thread, feature } => forget_feature(&client, json, &thread, &feature).await,
        Command::OutputVersion(a) => set_output_version(&client, json, a).await,
        Command::Fork {
            thread,
            from_step,
            thread_id,
            rerun_effects,
        } => {
            let v = client
                .fork(&thread, from_step, thread_id.as_deref(), &rerun_effects)
                .await?;
            print(json, &v, render::forked)
        }
        Command::Schedule(cmd) => schedule(&client, json, cmd).await,
        Command::Restart {
            thread,
            from_step,
            rerun_effects,
        } => {
            let v = client.restart(&thread, from_step, &rerun_effects).await?;
            print(json, &v, |v| render::ack(&format!("restart from entry {from_step}"), v))
        }
        Command::Cancel { thread, reason } => {
            let v = client.cancel(&thread, reason.as_deref()).await?;
            print(json, &v, |v| render::ack("cancel", v))
        }
        Command::Resolve(a) => resolve(&client, json, a).await,
        Command::Dev(d) => dev(d).await,
        Command::Sim(a) => sim(a).await,
        Command::Loadgen(a) => loadgen(&cli.api, cli.token.as_deref(), json, a).await,
        Command::List {
            status,
            limit,
            waiting_on,
        } => {
            let runs = client.list_waiting(status.as_deref(), limit, waiting_on.as_deref());
            print(json, &runs.await?, render::list)
        }
        Command::Pause(a) => pause(&client, json, a, false).await,
        Command::Unpause(a) => pause(&client, json, a, true).await,
        Command::Pauses => print(json, &client.pauses().await?, render::pauses),
        Command::Workers => print(json, &client.workers().await?, render::workers),
        Command::Workflows => print(json, &client.workflows().await?, render::workflows),
    }
}

/// `savepoint forget-feature`: the run stops needing a value feature no build names.
async fn forget_feature(client: &ApiClient, json: bool, thread: &str, feature: &str) -> anyhow::Result<()> {
    let v = client.forget_feature(thread, feature).await?;
    print(json, &v, |v| render::ack(&format!("forget {feature} in"), v))
}

/// `savepoint output-version`: the version a completed child's output was written at.
async fn set_output_version(client: &ApiClient, json: bool, a: OutputVersionArgs) -> anyhow::Result<()> {
    let v = client.set_output_version(&a.thread, a.call, &a.version).await?;
    print(json, &v, |v| {
        render::ack(&format!("output version {} for call {} of", a.version, a.call), v)
    })
}

/// `savepoint start`: starts a run and prints its id and status.
async fn start(client: &ApiClient, json: bool, a: StartArgs) -> anyhow::Result<()> {
    let input = a.input.as_deref().map(|s| parse_json_arg("--input", s)).transpose()?;
    let timeout = a.timeout.map(|d| d.as_secs().max(1));
    let v = client
        .start_with_timeout(&a.workflow, input, a.thread_id.as_deref(), timeout)
        .await?;
    print(json, &v, |v| render::ack("started", v))
}

/// `savepoint openapi`: prints the OpenAPI document, or writes it to `out`.
fn openapi(out: Option<std::path::PathBuf>, max_body: Option<usize>) -> anyhow::Result<()> {
    let max = match max_body {
        Some(n) => n,
        None => {
            savepoint_runtime::config::Config::load(None, &savepoint_runtime::config::ProcessEnv)?
                .scheduler
                .max_input_bytes
        }
    };
    let doc = savepoint_scheduler::openapi_json(max);
    match out {
        Some(path) => {
            std::fs::write(&path, doc).with_context(|| format!("cannot write {}", path.display()))?;
            eprintln!("wrote {}", path.display());
        }
        None => print!("{doc}"),
    }
    Ok(())
}

/// `savepoint wait`: long-polls until the run ends or `timeout` seconds pass; the exit code
/// says how it ended.
async fn wait(client: &ApiClient, json: bool, thread: &str, timeout: Option<f64>) -> anyhow::Result<()> {
    if timeout.is_some_and(|t| !(t >= 0.0 && t.is_finite())) {
        anyhow::bail!("--timeout must be a number of seconds, 0 or more");
    }
    let deadline = timeout.map(|t| Instant::now() + Duration::from_secs_f64(t));
    let v = loop {
        // One long poll at a time, each shorter than the client's 30 s request timeout.
        let left = deadline.map_or(25.0, |d| d.saturating_duration_since(Instant::now()).as_secs_f64());
        let v = client.await_result(thread, left.min(25.0)).await?;
        let ended = wait_code(v["status"].as_str().unwrap_or("")).is_some();
        if ended || deadline.is_some_and(|d| Instant::now() >= d) {
            break v;
        }
    };
    print(json, &v, render::run)?;
    match wait_code(v["status"].as_str().unwrap_or("")) {
        Some(0) => Ok(()),
        Some(code) => Err(ExitWith(code).into()),
        None => Err(ExitWith(6).into()),
    }
}

/// `savepoint resolve`: settles an effect left in doubt.
async fn resolve(client: &ApiClient, json: bool, a: ResolveArgs) -> anyhow::Result<()> {
    if let Some(all) = a.all.as_deref() {
        let effects = parse_json_arg("--all", all)?;
        let v = client.resolve_all(&a.thread, effects).await?;
        return print(json, &v, |v| render::ack("resolved", v));
    }
    let (Some(key), Some(applied)) = (a.key.as_deref(), a.applied) else {
        anyhow::bail!("name the effect's key and --applied, or settle every effect in doubt with --all");
    };
    let result = a.result.as_deref().map(|s| parse_json_arg("--result", s)).transpose()?;
    let v = client.resolve(&a.thread, key, applied, result).await?;
    print(json, &v, |v| render::ack("resolved", v))
}

/// `savepoint dev`: the scheduler and two workers in this process, quiet unless `RUST_LOG`
/// says otherwise.
async fn dev(d: DevCmd) -> anyhow::Result<()> {
    let cfg = savepoint_runtime::config::Config::load(d.config.as_deref(), &savepoint_runtime::config::ProcessEnv)?;
    if std::env::var_os("RUST_LOG").is_none() {
        std::env::set_var("RUST_LOG", "error");
    }
    let _telemetry = savepoint_runtime::telemetry::init(&cfg.log_format, "savepoint-dev");
    crate::dev::run(cfg, d.dev).await
}

/// `savepoint sim`: runs the seeds; fails naming every seed that broke an invariant.
async fn sim(a: crate::sim::SimArgs) -> anyhow::Result<()> {
    let failed = tokio::task::spawn_blocking(move || crate::sim::run(&a)).await?;
    if !failed.is_empty() {
        let seeds: Vec<String> = failed.iter().map(|r| r.seed.to_string()).collect();
        anyhow::bail!("{} seed(s) broke an invariant: {}", failed.len(), seeds.join(", "));
    }
    Ok(())
}

/// `savepoint loadgen`: drives load through the API and fails if a run was lost or an
/// effect repeated.
async fn loadgen(api: &str, token: Option<&str>, json: bool, a: crate::loadgen::LoadgenArgs) -> anyhow::Result<()> {
    let cfg = savepoint_runtime::config::Config::load(a.config.as_deref(), &savepoint_runtime::config::ProcessEnv)?;
    let report = crate::loadgen::run_with_token(cfg, api, token, a.clone()).await?;
    if json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", report.render());
    }
    let repeated = !report.repeated_deliveries.is_empty() && a.policy == "block"
        || (a.workflow == "invoice" && !report.repeated_effect_calls.is_empty());
    if report.lost > 0 || repeated {
        anyhow::bail!("{} runs lost, effects repeated: {repeated}", report.lost);
    }
    Ok(())
}

fn token_command(cmd: TokenCmd) -> anyhow::Result<()> {
    use savepoint_runtime::security::tokens::{new_token, token_digest};
    use savepoint_runtime::security::{Role, TokenSpec};
    let (name, role, token, fresh) = match cmd {
        TokenCmd::New { name, role } => (name, role, new_token(), true),
        TokenCmd::Hash { name, role } => {
            let mut line = String::new();
            std::io::stdin().read_line(&mut line)?;
            (name, role, line.trim().to_owned(), false)
        }
    };
    if Role::parse(&role).is_none() {
        anyhow::bail!("--role must be read, operate or admin, got {role:?}");
    }
    let spec = format!("{name}:{role}:{}", token_digest(&token));
    TokenSpec::parse_line(&spec)?;
    if fresh {
        eprintln!("token (give it to {name}; it is not stored anywhere):");
        println!("{token}");
        eprintln!("configuration line (SAVEPOINT_API_TOKENS or a line of SAVEPOINT_API_TOKENS_FILE):");
    }
    println!("{spec}");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_commands() {
        let cli = Cli::try_parse_from(["savepoint", "--json", "resolve", "t-1", "fx:1", "--applied", "false"]).unwrap();
        assert!(cli.json);
        assert!(matches!(
            cli.command,
            Command::Resolve(ResolveArgs {
                applied: Some(false),
                ..
            })
        ));
        assert!(Cli::try_parse_from(["savepoint", "resolve", "t-1", "fx:1"]).is_err());
        let cli = Cli::try_parse_from([
            "savepoint",
            "start",
            "invoice",
            "--input",
            "{\"id\":1}",
            "--api",
            "http://x:1",
        ])
        .unwrap();
        assert_eq!(cli.api, "http://x:1");
    }

    #[test]
    fn clap_definition_is_valid() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }

    #[test]
    fn json_args() {
        assert_eq!(parse_json_arg("v", "true").unwrap(), Value::Bool(true));
        let e = parse_json_arg("value", "yes").unwrap_err().to_string();
        assert!(e.contains("strings need quotes"), "{e}");
    }
}
