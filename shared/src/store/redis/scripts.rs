//! The Lua scripts, loaded once per store and invoked by SHA (EVALSHA, falling back to EVAL).

use redis::Script;

const PRELUDE: &str = include_str!("lua/_prelude.lua");

fn load(body: &str) -> Script {
    Script::new(&format!("{PRELUDE}\n{body}"))
}

/// Every script of the store.
pub(crate) struct Scripts {
    pub create: Script,
    pub claim: Script,
    pub commit: Script,
    pub suspend: Script,
    pub finish: Script,
    pub heartbeat: Script,
    pub event: Script,
    pub signal: Script,
    pub cancel: Script,
    pub unblock: Script,
    pub scan_due: Script,
    pub effect_intent: Script,
    pub effect_done: Script,
    pub effect_release: Script,
}

impl Scripts {
    pub(crate) fn new() -> Self {
        Self {
            create: load(include_str!("lua/create.lua")),
            claim: load(include_str!("lua/claim.lua")),
            commit: load(include_str!("lua/commit.lua")),
            suspend: load(include_str!("lua/suspend.lua")),
            finish: load(include_str!("lua/finish.lua")),
            heartbeat: load(include_str!("lua/heartbeat.lua")),
            event: load(include_str!("lua/event.lua")),
            signal: load(include_str!("lua/signal.lua")),
            cancel: load(include_str!("lua/cancel.lua")),
            unblock: load(include_str!("lua/unblock.lua")),
            scan_due: load(include_str!("lua/scan_due.lua")),
            effect_intent: load(include_str!("lua/effect_intent.lua")),
            effect_done: load(include_str!("lua/effect_done.lua")),
            effect_release: load(include_str!("lua/effect_release.lua")),
        }
    }
}
