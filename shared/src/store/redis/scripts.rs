//! The Lua scripts, loaded once per store and invoked by SHA (EVALSHA, falling back to EVAL).

use redis::Script;

const PRELUDE: &str = include_str!("lua/_prelude.lua");

fn load(body: &str) -> Script {
    Script::new(&format!("{PRELUDE}\n{body}"))
}

macro_rules! scripts {
    ($($name:ident),* $(,)?) => {
        /// Every script of the store.
        pub(crate) struct Scripts {
            $(pub $name: Script,)*
        }

        impl Scripts {
            pub(crate) fn new() -> Self {
                Self {
                    $($name: load(include_str!(concat!("lua/", stringify!($name), ".lua"))),)*
                }
            }
        }

    };
}

scripts!(
    create,
    claim,
    commit,
    suspend,
    finish,
    heartbeat,
    event,
    note,
    signal,
    cancel,
    unblock,
    retry,
    due_candidates,
    ring,
    mark_queued,
    effect_begin,
    effect_intent,
    effect_done,
    effect_release,
    effect_orphan,
    register_worker,
    live_workers,
    wake_unserved,
);
