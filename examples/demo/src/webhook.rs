//! `webhook {"url","steps","effect_at","policy"?,"step_ms"?}`: `steps` trivial steps (each
//! taking `step_ms`, default 0); at index
//! `effect_at` an effect POSTs `{"thread_id","step"}` to `url` with the headers
//! `Idempotency-Key: <key>` and `Fencing-Token: <fence>` (policy `block` by default, or
//! `retry_safe`); outputs `{"steps": n}`. A receiver that remembers the highest token per
//! key and refuses lower ones (409) stops a worker that lost its lease.

use serde::{Deserialize, Serialize};
use serde_json::json;
use std::time::Duration;

use savepoint::workflow::{Ctx, EffectPolicy, StepError, Workflow, WorkflowError};

use crate::EffectLog;

/// Input.
#[derive(Debug, Serialize, Deserialize)]
pub struct WebhookIn {
    /// Where to POST.
    pub url: String,
    /// Trivial steps.
    pub steps: u32,
    /// Index of the effect among the steps.
    pub effect_at: u32,
    /// `block` (default) or `retry_safe`.
    #[serde(default)]
    pub policy: Option<String>,
    /// Milliseconds each step takes (default 0), to keep runs in flight.
    #[serde(default)]
    pub step_ms: u64,
}

/// What the receiver answered (the `webhook.post` effect's result).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Delivered {
    /// Its HTTP status.
    pub status: u16,
}

/// Output.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct WebhookOut {
    /// The steps run.
    pub steps: u32,
}

/// The webhook workflow.
pub struct Webhook {
    log: EffectLog,
    http: reqwest::Client,
}

impl Webhook {
    /// With an effect log.
    pub fn new(log: EffectLog) -> Self {
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(10))
            .build()
            .unwrap_or_default();
        Self { log, http }
    }
}

impl Workflow for Webhook {
    const NAME: &'static str = "webhook";
    type Input = WebhookIn;
    type Output = WebhookOut;

    async fn run(&self, ctx: &Ctx, input: WebhookIn) -> Result<WebhookOut, WorkflowError> {
        let policy = match input.policy.as_deref() {
            None => EffectPolicy::Block,
            Some(p) => EffectPolicy::parse(p)
                .ok_or_else(|| WorkflowError::failed(format!("unknown policy {p:?}: use block or retry_safe")))?,
        };
        let thread = ctx.thread_id().to_string();
        for i in 0..input.steps {
            if i == input.effect_at {
                let (log, http, t, url) = (&self.log, &self.http, &thread, &input.url);
                let _: Delivered = ctx
                    .effect("webhook.post", format!("webhook:{thread}:{i}"), |fx| async move {
                        let resp = http
                            .post(url)
                            .header("Idempotency-Key", &fx.key)
                            .header("Fencing-Token", fx.fence.to_string())
                            .json(&json!({"thread_id": t, "step": i}))
                            .send()
                            .await?;
                        let status = resp.status();
                        if status == reqwest::StatusCode::CONFLICT {
                            // The receiver saw a newer attempt: this one is stale.
                            return Err(StepError::fatal("webhook refused a stale fencing token (409)"));
                        }
                        if !status.is_success() {
                            return Err(StepError::retryable(format!("webhook answered {status}")));
                        }
                        log.record(t, "webhook.post", &fx.key).await?;
                        Ok(Delivered {
                            status: status.as_u16(),
                        })
                    })
                    .policy(policy.clone())
                    .await?;
            }
            let ms = input.step_ms;
            let _: u32 = ctx
                .step(&format!("step-{i}"), || async move {
                    if ms > 0 {
                        tokio::time::sleep(Duration::from_millis(ms)).await;
                    }
                    Ok(i)
                })
                .await?;
        }
        Ok(WebhookOut { steps: input.steps })
    }
}
