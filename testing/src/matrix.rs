//! [`CrashMatrix`]: a run of the workflow per call failpoint and hit, killed there, resumed
//! by a clean worker, and driven through its human waits with scripted [`Answers`].

use serde::Serialize;
use serde_json::Value;

use savepoint::workflow::{Registry, Workflow};
use savepoint_worker::Setup;

use crate::{Answers, Settled, TestEnv, TestError, CALL_POINTS};

/// One case of a [`CrashMatrix`]: where the worker was killed and how the run ended.
#[derive(Debug, Clone)]
pub struct CrashCase {
    /// The failpoint spec, e.g. `effect.after_call=abort@2`.
    pub spec: String,
    /// How the run ended after the restart.
    pub settled: Settled,
    /// Answers (interrupts, signals) the kit delivered in this case.
    pub answered: usize,
    /// Answers delivered before the worker was killed: 0 for a crash before the first wait,
    /// 1 for one between the first answer and the second wait, …
    pub answered_before_crash: usize,
}

/// A crash at every call: runs the workflow once per call failpoint ([`CALL_POINTS`]) and
/// hit number, each in a fresh [`TestEnv`], kills the worker there (as `kill -9`) and lets a
/// clean worker take the run over. The run is driven through its interrupts and signals with
/// the [`Answers`] given, so the calls after a person's answer are crashed at too. A point's
/// hits stop when its N-th hit no longer happens in a whole run.
///
/// ```ignore
/// let cases = CrashMatrix::of::<Fulfil>(|_| registry(TestShop::default()), &order)
///     .answers(Answers::new().interrupt(SHIPPING_APPROVAL, &approved))
///     .run(|env, case| assert_eq!(case.settled.header.status, RunStatus::Completed, "{}", case.spec))
///     .await?;
/// ```
pub struct CrashMatrix<R> {
    registry: R,
    workflow: String,
    input: Result<Value, String>,
    answers: Answers,
}

impl<R: Fn(&Setup) -> Registry> CrashMatrix<R> {
    /// The matrix of the newest registered version of `workflow` by name, with a JSON input.
    /// `registry` builds each case's registry (called once per case: resources it builds are
    /// that case's).
    pub fn new(registry: R, workflow: &str, input: Value) -> Self {
        Self {
            registry,
            workflow: workflow.to_owned(),
            input: Ok(input),
            answers: Answers::new(),
        }
    }

    /// The matrix of `W` with its own input type (an input that does not encode is reported
    /// by [`CrashMatrix::run`]).
    pub fn of<W>(registry: R, input: &W::Input) -> Self
    where
        W: Workflow,
        W::Input: Serialize,
    {
        Self {
            registry,
            workflow: W::NAME.to_owned(),
            input: serde_json::to_value(input).map_err(|e| e.to_string()),
            answers: Answers::new(),
        }
    }

    /// Answers each case's human waits with these (each case starts from the full set).
    /// Without answers a case ends at the first wait.
    pub fn answers(mut self, answers: Answers) -> Self {
        self.answers = answers;
        self
    }

    /// Runs every case; `check` sees each case's environment (its stubs' counts, its crash
    /// count) and outcome before the environment is shut down. Returns every case run.
    pub async fn run<C>(self, mut check: C) -> Result<Vec<CrashCase>, TestError>
    where
        C: FnMut(&TestEnv, &CrashCase),
    {
        let input = self.input.clone().map_err(TestError::Input)?;
        let mut cases = Vec::new();
        for point in CALL_POINTS {
            for n in 1.. {
                let spec = format!("{point}=abort@{n}");
                let mut env = TestEnv::new(&self.registry).await?;
                env.crash_at(&spec)?;
                let thread = env.start_named(&self.workflow, input.clone()).await?;
                let driven = env.drive_answering(&thread, &mut self.answers.clone()).await?;
                let Some(answered_before_crash) = driven.answered_before_crash else {
                    env.shutdown().await;
                    break;
                };
                let case = CrashCase {
                    spec,
                    settled: driven.settled,
                    answered: driven.answered,
                    answered_before_crash,
                };
                check(&env, &case);
                cases.push(case);
                env.shutdown().await;
            }
        }
        Ok(cases)
    }
}

/// [`CrashMatrix::new`]`(registry, workflow, input).run(check)`: the matrix without answers,
/// each case ending at the run's first wait.
pub async fn crash_matrix<C>(
    registry: impl Fn(&Setup) -> Registry,
    workflow: &str,
    input: Value,
    check: C,
) -> Result<Vec<CrashCase>, TestError>
where
    C: FnMut(&TestEnv, &CrashCase),
{
    CrashMatrix::new(registry, workflow, input).run(check).await
}
