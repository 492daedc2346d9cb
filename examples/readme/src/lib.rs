//! `my_crate`: the application code the README's samples call, and the host that compiles
//! every one of them.
//!
//! **How the README is compiled.** The module `readme` (only under `cfg(doctest)`) has the
//! whole `README.md` as its documentation, so `cargo test --doc -p savepoint-readme` compiles
//! each ```` ```rust ```` block as a doctest, in place, nothing copied (the fast tier of
//! `.ci/run` runs `cargo test --workspace --all-features --doc`, this crate included). Every
//! block is a doctest; none is checked by comparing text with a compiled file instead. A block
//! is self-contained: it says what it uses (`use savepoint::workflow::…`, and `use my_crate::…`
//! for "your own code", which is this library), a fragment is written inside the function it
//! belongs in (no block needs hidden `# ` lines, which GitHub shows). By the heading each sits
//! under:
//!
//! | block | how |
//! |---|---|
//! | "Why": the `invoice` workflow | compiled: a type and its `impl Workflow` |
//! | "2. The workflow": `fulfil` | compiled: a type and its `impl Workflow`, parallel calls included |
//! | "3. The worker": `fn main` | compiled, not run (`no_run`: it would start a worker) |
//! | "6. Call it from Rust" | compiled: an `async fn` over the typed client |
//! | "7. Where a run is": the fencing token | compiled: an `async fn` with the effect |
//! | "10. When a recorded value's type changes" | compiled: a versioned type and its `impl Workflow` |
//! | "Child workflows" | compiled: an `async fn` with the calls |
//! | "Task queues" | compiled: an `async fn` with the three steps |
//! | "Testing your workflows" | compiled as a test crate, not run (`no_run test_harness`); `testing/tests/testkit.rs` runs the same tests. Its `include_str!("fixtures/…")` finds `src/fixtures`, a link to `testing/tests/fixtures`. |
//!
//! A doctest compiles its functions and types and calls nothing but a `main`. The rules,
//! each kept by a test below:
//! - a block with a `main` is `no_run` (a sample's `main` starts a worker or needs services);
//! - a block of `#[test]` / `#[tokio::test]` functions is `no_run test_harness`: outside a test
//!   harness rustdoc drops them before type checking, and the doctest would pass whatever
//!   they say;
//! - a block is `ignore` only when it is deliberately not compilable (a compile error shown on
//!   purpose), listed in [`IGNORED`] with why (none is, today);
//! - every other fenced block names its language (`text`, `sh`, `console`, …): rustdoc
//!   compiles a bare ```` ``` ```` block as Rust.
//!
//! Attributes follow a space (```` ```rust no_run ````): rustdoc reads commas and spaces
//! alike, and GitHub takes the first word as the language.
//!
//! The stand-ins below do just enough to be honest code (no `todo!()`); the types of the
//! walkthrough's order-fulfilment workflow are the example's own (`custom_worker_flows`).

use serde::{Deserialize, Serialize};
use serde_json::Value;

use savepoint::workflow::StepResult;

/// The walkthrough's workflow crate (`examples/custom_worker/flows`), as "your crate".
pub use custom_worker_flows::{
    Charge, Fulfil, Fulfilled, Order, Recorded, Shipment, ShippingApproval, Shop, SHIPPING_APPROVAL,
};

// The README, whose ```rust blocks are this crate's doctests. `readme.rs` is the one line
// `#![doc = include_str!("../../../README.md")]`, so a doctest's line is its README line
// ("src/readme.rs - readme (line 20)" is the block at README.md:20).
#[cfg(doctest)]
mod readme;

/// The ```` ```rust ```` blocks of the README marked `ignore`, each by its first line, with
/// why it cannot compile. Empty: every block compiles.
pub const IGNORED: &[(&str, &str)] = &[];

/// A failure of one of the stand-in services (any `std::error::Error` converts into a
/// retryable `StepError` with `?`).
#[derive(Debug, thiserror::Error)]
#[error("{service} is unavailable")]
pub struct ServiceError {
    /// Which service.
    pub service: &'static str,
}

// ---- "Why": the invoice workflow ----

/// The invoice to process.
#[derive(Debug, Serialize, Deserialize)]
pub struct InvoiceIn {
    /// Its id (the ledger key is derived from it).
    pub invoice_id: String,
}

/// The invoice's totals.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Totals {
    /// The sum of the lines, in cents.
    pub total_cents: i64,
    /// Its currency.
    pub currency: String,
}

/// What the ledger answers a post with.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Posted {
    /// The idempotency key it was posted under.
    pub key: String,
    /// The fencing token the post carried.
    pub fence: u64,
}

/// Reads the invoice's text.
pub async fn read_pdf(input: &InvoiceIn) -> StepResult<String> {
    Ok(format!("Invoice {}\nconsulting 1000.00 EUR\n", input.invoice_id))
}

/// The totals of an invoice's text: the last two words of each line that has an amount.
pub fn extract(text: &str) -> StepResult<Totals> {
    let mut totals = Totals {
        total_cents: 0,
        currency: "EUR".into(),
    };
    for line in text.lines() {
        if let [.., amount, currency] = line.split_whitespace().collect::<Vec<_>>().as_slice() {
            if let Ok(v) = amount.parse::<f64>() {
                totals.total_cents += (v * 100.0).round() as i64;
                totals.currency = (*currency).to_owned();
            }
        }
    }
    Ok(totals)
}

/// Posts the totals to the ledger under `key`, carrying the fencing token.
pub async fn ledger_post(key: String, fence: u64, _totals: &Totals) -> StepResult<Posted> {
    Ok(Posted { key, fence })
}

/// Asks the ledger whether a post under `key` happened (the reconcile policy's question):
/// its result if so.
pub async fn ledger_lookup(key: String) -> StepResult<Option<Value>> {
    Ok(Some(serde_json::to_value(Posted { key, fence: 0 })?))
}

/// Emails the totals, under `key` (the mail provider's idempotency key).
pub async fn send_email(_key: String, _totals: &Totals) -> StepResult<()> {
    Ok(())
}

// ---- "2. The workflow": the clients fulfil calls ----

/// The warehouse's client.
#[derive(Debug, Default)]
pub struct Warehouse;

impl Warehouse {
    /// Reserves the order's stock under `key`.
    pub async fn reserve(&self, _key: &str) -> Result<(), ServiceError> {
        Ok(())
    }

    /// Ships under `key` with `carrier`.
    pub async fn ship(&self, key: &str, carrier: &str) -> Result<Shipment, ServiceError> {
        Ok(Shipment {
            tracking: format!("TRK-{key}"),
            carrier: carrier.to_owned(),
        })
    }
}

/// The payment provider's client.
#[derive(Debug, Default)]
pub struct Payments;

impl Payments {
    /// Charges `amount_cents` under `key`.
    pub async fn charge(&self, key: &str, amount_cents: u64) -> Result<Charge, ServiceError> {
        Ok(Charge {
            charge_id: format!("ch_{key}"),
            amount_cents,
        })
    }

    /// Refunds the charge under `key`.
    pub async fn refund(&self, _key: String) -> StepResult<()> {
        Ok(())
    }
}

/// The shipping quote for an order, in cents.
pub async fn quote_service(order: &Order) -> Result<u64, ServiceError> {
    Ok(450 + 50 * u64::from(order.qty))
}

// ---- "Task queues": the three steps ----

/// A document to index.
#[derive(Debug, Serialize, Deserialize)]
pub struct Doc {
    /// Its text.
    pub text: String,
}

/// The document's text.
pub async fn extract_text(doc: &Doc) -> StepResult<String> {
    Ok(doc.text.clone())
}

/// An embedding of `text` (the work the `gpu` fleet does).
pub async fn embed(text: &str) -> StepResult<Vec<f32>> {
    Ok(text.split_whitespace().map(|w| w.len() as f32).collect())
}

/// Stores an embedding.
pub async fn store_embedding(_embedding: &[f32]) -> StepResult<()> {
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const README: &str = include_str!("../../../README.md");

    /// A fenced block: its opening line (1-based), the words of its info string, its text.
    struct Block {
        line: usize,
        info: Vec<String>,
        body: String,
    }

    impl Block {
        fn is_rust(&self) -> bool {
            self.info.first().map(String::as_str) == Some("rust")
        }

        fn has(&self, attr: &str) -> bool {
            self.info.iter().any(|w| w == attr)
        }
    }

    /// Every fenced block (rustdoc splits the info string at commas and spaces).
    fn blocks(text: &str) -> Vec<Block> {
        let mut out: Vec<Block> = Vec::new();
        let mut open = false;
        for (i, line) in text.lines().enumerate() {
            match line.trim_start().strip_prefix("```") {
                Some(info) if !open => {
                    let info = info
                        .split([',', ' ', '\t'])
                        .filter(|w| !w.is_empty())
                        .map(str::to_owned);
                    out.push(Block {
                        line: i + 1,
                        info: info.collect(),
                        body: String::new(),
                    });
                    open = true;
                }
                Some(_) => open = false,
                None if open => {
                    if let Some(b) = out.last_mut() {
                        b.body.push_str(line);
                        b.body.push('\n');
                    }
                }
                None => {}
            }
        }
        assert!(!open, "an unclosed fence");
        out
    }

    #[test]
    fn every_fenced_block_names_its_language() {
        let bare: Vec<usize> = blocks(README)
            .iter()
            .filter(|b| b.info.is_empty())
            .map(|b| b.line)
            .collect();
        assert!(
            bare.is_empty(),
            "README.md lines {bare:?}: rustdoc compiles a fence without a language as Rust; write \
             ```text (or sh, console, …)"
        );
    }

    #[test]
    fn no_rust_block_is_ignored_without_a_reason() {
        for b in blocks(README).iter().filter(|b| b.is_rust() && b.has("ignore")) {
            let first = b.body.lines().next().unwrap_or("").trim();
            assert!(
                IGNORED.iter().any(|(start, why)| *start == first && !why.is_empty()),
                "README.md line {}: a ```rust block marked ignore is not compiled; make it compile, \
                 or list it in IGNORED with why",
                b.line
            );
        }
    }

    /// Outside a test harness `#[test]` functions are dropped before type checking: such a
    /// doctest would pass whatever it says.
    #[test]
    fn a_block_of_tests_is_compiled_as_tests() {
        for b in blocks(README).iter().filter(|b| b.is_rust()) {
            let tests = b.body.contains("#[test]") || b.body.contains("#[tokio::test");
            assert!(
                !tests || b.has("test_harness"),
                "README.md line {}: a block of #[test] functions needs ```rust no_run test_harness, \
                 or rustdoc compiles none of them",
                b.line
            );
        }
    }

    /// A doctest runs its `main`; a sample's `main` starts a worker or talks to services,
    /// which would hang or fail the doc tests.
    #[test]
    fn a_block_with_a_main_is_not_run() {
        for b in blocks(README).iter().filter(|b| b.is_rust()) {
            assert!(
                !b.body.contains("fn main(") || b.has("no_run"),
                "README.md line {}: a block with fn main runs as a doctest; write ```rust no_run",
                b.line
            );
        }
    }

    #[test]
    fn the_readme_has_rust_blocks_to_compile() {
        assert!(
            blocks(README).iter().any(Block::is_rust),
            "no ```rust block: is this the README?"
        );
    }

    #[test]
    fn blocks_are_read_as_rustdoc_reads_them() {
        let b = blocks("a\n```rust no_run,test_harness\nx\n```\n```\ny\n```\n");
        assert_eq!(b.len(), 2);
        assert_eq!((b[0].line, b[0].body.as_str()), (2, "x\n"));
        assert!(b[0].is_rust() && b[0].has("no_run") && b[0].has("test_harness") && !b[0].has("ignore"));
        assert!(b[1].info.is_empty() && !b[1].is_rust());
    }

    #[test]
    fn the_stand_ins_compute_what_they_say() {
        let t = extract("Invoice INV-1\nconsulting 1000.00 EUR\nhosting 250.50 EUR\n").unwrap();
        assert_eq!((t.total_cents, t.currency.as_str()), (125_050, "EUR"));
    }
}
