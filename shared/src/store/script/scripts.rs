//! The Lua scripts, loaded once per store. On Redis they are invoked by SHA (EVALSHA,
//! falling back to EVAL); the embedded engine compiles each once by name.

pub(crate) use crate::store::engine::ScriptDef;

const PRELUDE: &str = include_str!("lua/_prelude.lua");

fn load(name: &'static str, body: &str) -> ScriptDef {
    ScriptDef::new(name, format!("{PRELUDE}\n{body}"))
}

macro_rules! scripts {
    ($($name:ident),* $(,)?) => {
        /// Every script of the store.
        pub(crate) struct Scripts {
            $(pub $name: ScriptDef,)*
        }

        impl Scripts {
            pub(crate) fn new() -> Self {
                Self {
                    $($name: load(stringify!($name), include_str!(concat!("lua/", stringify!($name), ".lua"))),)*
                }
            }

            /// Every script (the embedded engine's lint of the commands they use).
            #[allow(dead_code)]
            pub(crate) fn all(&self) -> Vec<&ScriptDef> {
                vec![$(&self.$name,)*]
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
