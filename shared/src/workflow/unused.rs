//! Intents an attempt took and never acted on: saying so to the store in the background, so
//! the run does not block on a call that never started.

use std::sync::Arc;
use std::time::Duration;

use savepoint_core::ids::{EffectKey, ThreadId};
use savepoint_core::seam::RunStore;

/// First pause between retries of an effect write after a transient error (doubling).
pub(super) const WRITE_RETRY: Duration = Duration::from_millis(20);

/// How long a worker keeps trying to say that an intent it took was never acted on.
const UNUSED_SETTLE_FOR: Duration = Duration::from_secs(3600);

/// An attempt that stopped before calling an effect could not free the effect's intent
/// (a partition, a lost reply), or freed it only after its lease ran out: left alone, the
/// intent reads (or read) as a call that may have started and blocks the run. In the
/// background, until it is heard: record the fact in the run (the store's `effect_unused`, which also
/// unblocks a run already blocked on it) and free the intent.
pub(super) fn settle_unused_later(
    store: Arc<dyn RunStore>,
    key: EffectKey,
    thread: ThreadId,
    (index, fence): (u32, u64),
    mut released: bool,
) {
    tokio::spawn(async move {
        let until = tokio::time::Instant::now() + UNUSED_SETTLE_FOR;
        let mut recorded = false;
        let mut pause = WRITE_RETRY;
        loop {
            if !recorded {
                match store.effect_unused(&thread, index, fence).await {
                    Ok(r) => {
                        tracing::info!(thread.id = %thread, effect.key = %key, ?r, "recorded an intent that was never acted on");
                        recorded = true;
                    }
                    Err(e) if e.is_transient() => {}
                    Err(e) => {
                        tracing::warn!(thread.id = %thread, effect.key = %key, error = %e, "could not record an unused intent");
                        recorded = true;
                    }
                }
            }
            if !released {
                match store.effect_release(&key, &thread, index, fence).await {
                    Ok(_) => released = true,
                    Err(e) if e.is_transient() => {}
                    Err(_) => released = true,
                }
            }
            if recorded && released {
                return;
            }
            if tokio::time::Instant::now() >= until {
                tracing::warn!(
                    thread.id = %thread, effect.key = %key,
                    "gave up saying that the intent at entry {index} (fence {fence}) was never acted on; if the run \
                     blocks on it: savepoint resolve {thread} {key} --applied false"
                );
                return;
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_secs(5));
        }
    });
}
