//! `invoice {"invoice_id","pdf_path"?}`: read_pdf → extract_totals → effect `ledger.post`
//! (key `ledger:<invoice_id>`, policy reconcile) → effect `email.send` (key
//! `email:<thread_id>`, policy block) → the totals.

use serde::{Deserialize, Serialize};

use savepoint::workflow::{Ctx, EffectPolicy, StepError, Workflow, WorkflowError};

use crate::EffectLog;

/// Input.
#[derive(Debug, Serialize, Deserialize)]
pub struct InvoiceIn {
    /// Invoice id (the ledger key is derived from it).
    pub invoice_id: String,
    /// A text file standing in for the PDF; a generated text when absent.
    #[serde(default)]
    pub pdf_path: Option<String>,
}

/// Output.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Totals {
    /// Invoice id.
    pub invoice_id: String,
    /// Sum of the lines, in cents.
    pub total_cents: i64,
    /// Number of lines.
    pub lines: usize,
    /// Currency.
    pub currency: String,
}

/// What the ledger answers a post with (the `ledger.post` effect's result).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Posted {
    /// The key it was posted under.
    pub posted: String,
}

/// What the mail provider answers (the `email.send` effect's result).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Sent {
    /// The key it was sent under.
    pub sent: String,
}

/// The seed's invoice workflow.
pub struct Invoice {
    log: EffectLog,
}

impl Invoice {
    /// With an effect log.
    pub fn new(log: EffectLog) -> Self {
        Self { log }
    }
}

async fn read_pdf(input: &InvoiceIn) -> Result<String, StepError> {
    match &input.pdf_path {
        Some(path) => tokio::fs::read_to_string(path)
            .await
            .map_err(|e| StepError::fatal(format!("cannot read {path}: {e}"))),
        None => Ok(format!(
            "Invoice {}\nconsulting 1000.00 EUR\nhosting 250.00 EUR\n",
            input.invoice_id
        )),
    }
}

fn extract(invoice_id: &str, text: &str) -> Result<Totals, StepError> {
    let mut total_cents = 0i64;
    let mut lines = 0;
    let mut currency = String::from("EUR");
    for line in text.lines() {
        let words: Vec<&str> = line.split_whitespace().collect();
        if let [.., amount, cur] = words.as_slice() {
            if let Ok(v) = amount.parse::<f64>() {
                total_cents += (v * 100.0).round() as i64;
                lines += 1;
                currency = (*cur).to_owned();
            }
        }
    }
    if lines == 0 {
        return Err(StepError::fatal("no amounts found in the invoice text"));
    }
    Ok(Totals {
        invoice_id: invoice_id.to_owned(),
        total_cents,
        lines,
        currency,
    })
}

impl Workflow for Invoice {
    const NAME: &'static str = "invoice";
    type Input = InvoiceIn;
    type Output = Totals;

    async fn run(&self, ctx: &Ctx, input: InvoiceIn) -> Result<Totals, WorkflowError> {
        let text: String = ctx.step("read_pdf", || read_pdf(&input)).await?;
        let totals: Totals = ctx
            .step("extract_totals", || async { extract(&input.invoice_id, &text) })
            .await?;
        let thread = ctx.thread_id().to_string();
        let log = self.log.clone();
        // In doubt after a crash, the ledger (the effects log) is asked: a post it has is the
        // effect's result, as the call would have returned it.
        let reconcile = EffectPolicy::reconcile(move |key: String| {
            let log = log.clone();
            async move {
                match log.find(&key).await? {
                    Some(_) => Ok(Some(serde_json::to_value(Posted { posted: key })?)),
                    None => Ok(None),
                }
            }
        });
        let log = &self.log;
        let t = &thread;
        let _posted: Posted = ctx
            .effect("ledger.post", format!("ledger:{}", input.invoice_id), |fx| async move {
                log.record(t, "ledger.post", &fx.key).await?;
                Ok(Posted { posted: fx.key })
            })
            .policy(reconcile)
            .await?;
        let _sent: Sent = ctx
            .effect("email.send", format!("email:{thread}"), |fx| async move {
                log.record(t, "email.send", &fx.key).await?;
                Ok(Sent { sent: fx.key })
            })
            .await?;
        Ok(totals)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn extracts_totals() {
        let t = extract("INV-1", "Invoice INV-1\nconsulting 1000.00 EUR\nhosting 250.50 EUR\n").unwrap();
        assert_eq!((t.total_cents, t.lines, t.currency.as_str()), (125_050, 2, "EUR"));
        assert!(extract("INV-1", "nothing here").is_err());
    }
}
