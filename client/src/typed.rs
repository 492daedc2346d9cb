//! A typed Rust client of the scheduler's HTTP API: start a workflow by its type with its
//! typed input, await its typed output, and send it typed resume values and signals. The HTTP
//! API stays the contract; this wraps [`ApiClient`] (which the CLI uses) with the workflow's
//! Rust types, so a caller written against `Fulfil` cannot send `Fulfil` the wrong input.
//!
//! ```no_run
//! # use savepoint::workflow::{Ctx, Workflow, WorkflowError};
//! # struct Fulfil;
//! # impl Workflow for Fulfil {
//! #     const NAME: &'static str = "fulfil";
//! #     type Input = String;
//! #     type Output = u32;
//! #     async fn run(&self, _: &Ctx, _: String) -> Result<u32, WorkflowError> { Ok(1) }
//! # }
//! # async fn demo() -> Result<(), savepoint_client::ClientError> {
//! use savepoint_client::Client;
//! use std::time::Duration;
//!
//! let client = Client::new("http://127.0.0.1:7070");
//! let run = client.start::<Fulfil>(&"order-7".to_owned()).await?;
//! let shipped: u32 = run.output(Duration::from_secs(60)).await?;
//! # Ok(()) }
//! ```

use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;
use std::marker::PhantomData;
use std::time::Duration;
use tokio::time::Instant;

use savepoint::workflow::{Interrupt, Signal, Workflow};

use crate::api::{ApiClient, ClientError};
use crate::model::RunView;

/// Longest single long-poll of [`Run::output`] (the API caps a wait at 30 s).
const POLL: Duration = Duration::from_secs(25);

/// How often [`Run::interrupt_pending`] looks at the run.
const PENDING_POLL: Duration = Duration::from_millis(200);

/// A typed client of one scheduler. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Client {
    api: ApiClient,
}

impl Client {
    /// A client of the API at `base` (e.g. `http://127.0.0.1:7070`).
    pub fn new(base: impl Into<String>) -> Self {
        Self {
            api: ApiClient::new(base),
        }
    }

    /// Sends `Authorization: Bearer <token>` with every request (a scheduler with API tokens).
    pub fn with_token(self, token: Option<String>) -> Self {
        Self {
            api: self.api.with_token(token),
        }
    }

    /// The untyped client underneath (every endpoint, JSON in and out).
    pub fn api(&self) -> &ApiClient {
        &self.api
    }

    /// The live workers (`GET /v1/workers`): what each serves, its queues, load and last
    /// heartbeat.
    pub async fn workers(&self) -> Result<crate::model::WorkerList, ClientError> {
        let v = self.api.workers().await?;
        self.decode(v, "/v1/workers")
    }

    /// The workflows live workers serve (`GET /v1/workflows`): versions, published schemas,
    /// queues and runs by status.
    pub async fn workflows(&self) -> Result<crate::model::WorkflowList, ClientError> {
        let v = self.api.workflows().await?;
        self.decode(v, "/v1/workflows")
    }

    /// Pauses a workflow, a version, a task queue or the runs a filter matches
    /// (`POST /v1/pauses`).
    pub async fn pause(&self, what: &crate::model::PauseRequest) -> Result<crate::model::PauseReply, ClientError> {
        let v = self.api.pause(&encode(what)?).await?;
        self.decode(v, "/v1/pauses")
    }

    /// Lifts a pause and puts back the runs it stopped (`POST /v1/pauses/resume`).
    pub async fn resume_pause(
        &self,
        what: &crate::model::ResumeRequest,
    ) -> Result<crate::model::PauseReply, ClientError> {
        let v = self.api.resume_pause(&encode(what)?).await?;
        self.decode(v, "/v1/pauses/resume")
    }

    /// The pauses in force and how many runs they stopped (`GET /v1/pauses`).
    pub async fn pauses(&self) -> Result<crate::model::PauseList, ClientError> {
        let v = self.api.pauses().await?;
        self.decode(v, "/v1/pauses")
    }

    /// The runs waiting on `on` (`GET /v1/runs?waiting_on=`), newest first, each with why
    /// and until when.
    pub async fn waiting_on(
        &self,
        on: crate::model::WaitingOn,
        limit: Option<u32>,
    ) -> Result<crate::model::RunList, ClientError> {
        let v = self.api.list_waiting(None, limit, Some(on.as_str())).await?;
        self.decode(v, "/v1/runs")
    }

    fn decode<T: serde::de::DeserializeOwned>(&self, v: Value, path: &str) -> Result<T, ClientError> {
        serde_json::from_value(v).map_err(|e| ClientError::Decode {
            url: format!("{}{path}", self.api.base_url()),
            message: format!("the answer does not decode: {e}"),
        })
    }

    /// Starts a run of `W` with its input; the thread id is generated.
    pub async fn start<W>(&self, input: &W::Input) -> Result<Run<W>, ClientError>
    where
        W: Workflow,
        W::Input: Serialize,
    {
        self.start_at::<W>(None, input).await
    }

    /// Starts a run of `W` under the thread id `thread` (idempotent: starting the same id
    /// again answers the existing run, or 409 if its input differs).
    pub async fn start_as<W>(&self, thread: &str, input: &W::Input) -> Result<Run<W>, ClientError>
    where
        W: Workflow,
        W::Input: Serialize,
    {
        self.start_at::<W>(Some(thread), input).await
    }

    /// Starts a run of `W` that fails with a timeout if it has not ended within `timeout`
    /// (whole seconds, at least 1), optionally under the thread id `thread`.
    pub async fn start_with_timeout<W>(
        &self,
        thread: Option<&str>,
        input: &W::Input,
        timeout: std::time::Duration,
    ) -> Result<Run<W>, ClientError>
    where
        W: Workflow,
        W::Input: Serialize,
    {
        self.start_full::<W>(thread, input, Some(timeout.as_secs().max(1)))
            .await
    }

    async fn start_at<W>(&self, thread: Option<&str>, input: &W::Input) -> Result<Run<W>, ClientError>
    where
        W: Workflow,
        W::Input: Serialize,
    {
        self.start_full::<W>(thread, input, None).await
    }

    async fn start_full<W>(
        &self,
        thread: Option<&str>,
        input: &W::Input,
        timeout_secs: Option<u64>,
    ) -> Result<Run<W>, ClientError>
    where
        W: Workflow,
        W::Input: Serialize,
    {
        let input = encode(input)?;
        let v = self
            .api
            .start_with_timeout(W::NAME, Some(input), thread, timeout_secs)
            .await?;
        let thread = v["thread_id"].as_str().unwrap_or_default().to_owned();
        Ok(self.run::<W>(&thread))
    }

    /// The run `thread` of `W` (no request is made).
    pub fn run<W: Workflow>(&self, thread: &str) -> Run<W> {
        Run {
            api: self.api.clone(),
            thread: thread.to_owned(),
            _w: PhantomData,
        }
    }
}

/// A run of the workflow `W`.
#[derive(Debug)]
pub struct Run<W> {
    api: ApiClient,
    thread: String,
    _w: PhantomData<fn() -> W>,
}

impl<W> Clone for Run<W> {
    fn clone(&self) -> Self {
        Self {
            api: self.api.clone(),
            thread: self.thread.clone(),
            _w: PhantomData,
        }
    }
}

impl<W: Workflow> Run<W> {
    /// The run's thread id.
    pub fn thread_id(&self) -> &str {
        &self.thread
    }

    /// The run as the API shows it (`GET /v1/runs/{thread}`): status, where it is, why.
    pub async fn view(&self) -> Result<RunView, ClientError> {
        let v = self.api.get(&self.thread).await?;
        serde_json::from_value(v).map_err(|e| ClientError::Decode {
            url: format!("{}/v1/runs/{}", self.api.base_url(), self.thread),
            message: format!("the run view does not decode: {e}"),
        })
    }

    /// Waits up to `timeout` until the run waits at the interrupt `handle` and returns that
    /// interrupt's payload (the question), so a caller answers only what is asked. A run that
    /// ends first answers [`ClientError::Run`]; one not there by `timeout`,
    /// [`ClientError::Timeout`].
    pub async fn interrupt_pending<T>(
        &self,
        handle: impl Into<Interrupt<T>>,
        timeout: Duration,
    ) -> Result<Value, ClientError> {
        let handle = handle.into();
        let deadline = Instant::now() + timeout;
        loop {
            let view = self.view().await?;
            if let Some(i) = view.interrupts.iter().find(|i| i.name == handle.name()) {
                return Ok(i.payload.clone());
            }
            if view.status.0.is_final() {
                return Err(ClientError::Run {
                    thread: self.thread.clone(),
                    status: view.status.0.as_str().to_owned(),
                    detail: format!("it ended before asking {:?}", handle.name()),
                });
            }
            if Instant::now() >= deadline {
                return Err(ClientError::Timeout {
                    thread: self.thread.clone(),
                    waited: timeout,
                });
            }
            tokio::time::sleep(PENDING_POLL.min(deadline.saturating_duration_since(Instant::now()))).await;
        }
    }

    /// Waits up to `timeout` for the run to complete and returns its output. A run that
    /// fails, is cancelled or is blocked answers [`ClientError::Run`] with its status and
    /// reason; one still going after `timeout` answers [`ClientError::Timeout`].
    pub async fn output(&self, timeout: Duration) -> Result<W::Output, ClientError>
    where
        W::Output: DeserializeOwned,
    {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let v = self
                .api
                .await_result(&self.thread, left.min(POLL).as_secs_f64())
                .await?;
            match v["status"].as_str().unwrap_or("") {
                "completed" => {
                    return serde_json::from_value(v["output"].clone()).map_err(|e| ClientError::Decode {
                        url: format!("{}/v1/runs/{}/result", self.api.base_url(), self.thread),
                        message: format!("the output of {} does not decode into its Output type: {e}", W::NAME),
                    })
                }
                status @ ("failed" | "cancelled" | "blocked") => {
                    let detail = ["error", "blocked_reason", "reason"]
                        .iter()
                        .find_map(|k| v[*k].as_str())
                        .unwrap_or("")
                        .to_owned();
                    return Err(ClientError::Run {
                        thread: self.thread.clone(),
                        status: status.to_owned(),
                        detail,
                    });
                }
                _ if left.is_zero() => {
                    return Err(ClientError::Timeout {
                        thread: self.thread.clone(),
                        waited: timeout,
                    })
                }
                _ => {}
            }
        }
    }

    /// Answers the interrupt `handle` (the workflow's [`Interrupt<T>`] constant; the answer
    /// must be a `T`) once the run waits at it: a run that waits at another interrupt, or at
    /// none, answers [`ClientError::Run`] saying so and nothing is sent. The API checks the
    /// value against the schema the worker published (a wrong shape is refused with 422).
    pub async fn answer<T: Serialize>(&self, handle: impl Into<Interrupt<T>>, value: &T) -> Result<Value, ClientError> {
        let handle = handle.into();
        let view = self.view().await?;
        if !view.interrupts.iter().any(|i| i.name == handle.name()) {
            let waits: Vec<&str> = view.interrupts.iter().map(|i| i.name.as_str()).collect();
            return Err(ClientError::Run {
                thread: self.thread.clone(),
                status: view.status.0.as_str().to_owned(),
                detail: format!(
                    "it does not wait at the interrupt {:?} (it waits at {waits:?}); nothing was sent",
                    handle.name()
                ),
            });
        }
        self.api.resume(&self.thread, encode(value)?, None).await
    }

    /// Answers whatever interrupt the run waits at with a value (checked by the API against
    /// that interrupt's published schema: a wrong shape is refused with 422). Prefer
    /// [`Run::answer`], which names the interrupt and types the answer.
    pub async fn resume<T: Serialize>(&self, value: &T) -> Result<Value, ClientError> {
        self.api.resume(&self.thread, encode(value)?, None).await
    }

    /// Sends a signal: `handle` is the workflow's [`Signal<T>`] constant (the value must be a
    /// `T`) or a name.
    pub async fn signal<T: Serialize>(&self, handle: impl Into<Signal<T>>, value: &T) -> Result<Value, ClientError> {
        let handle = handle.into();
        self.api.signal(&self.thread, handle.name(), encode(value)?, None).await
    }

    /// Cancels the run.
    pub async fn cancel(&self, reason: Option<&str>) -> Result<Value, ClientError> {
        self.api.cancel(&self.thread, reason).await
    }

    /// Pauses the run: it takes no new slice until [`Run::unpause`] (a slice in flight
    /// finishes its call and yields).
    pub async fn pause(&self, note: Option<&str>) -> Result<Value, ClientError> {
        let body = note.map(|n| serde_json::json!({ "note": n }));
        self.api.pause_run(&self.thread, body.as_ref()).await
    }

    /// Lifts the run's own pause and puts it back where the pause found it.
    pub async fn unpause(&self, note: Option<&str>) -> Result<Value, ClientError> {
        let body = note.map(|n| serde_json::json!({ "note": n }));
        self.api.unpause_run(&self.thread, body.as_ref()).await
    }
}

fn encode<T: Serialize>(v: &T) -> Result<Value, ClientError> {
    serde_json::to_value(v).map_err(|e| ClientError::Encode(e.to_string()))
}
