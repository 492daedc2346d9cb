//! The whole worker binary: the registry and one call. Config comes from `SAVEPOINT_*`
//! variables or `--config FILE` (see the README's configuration section).

use std::future::Future;
use std::pin::Pin;

use custom_worker_flows::{Fulfil, Shop};
use savepoint::workflow::StepError;
use savepoint_demo::EffectLog;

/// The example's shop: every effect is appended to the demo effects log (a Redis list), so
/// the smoke test counts at the "provider" that nothing happened twice.
struct LoggedShop(EffectLog);

impl Shop for LoggedShop {
    fn record<'a>(
        &'a self,
        thread: &'a str,
        effect: &'a str,
        key: &'a str,
    ) -> Pin<Box<dyn Future<Output = Result<(), StepError>> + Send + 'a>> {
        Box::pin(self.0.record(thread, effect, key))
    }
}

fn main() -> std::process::ExitCode {
    savepoint_worker::main_with(|store| {
        let mut registry = savepoint::workflow::Registry::new();
        registry.register(Fulfil::new(LoggedShop(EffectLog::new(store))));
        Ok(registry)
    })
}
