//! The Lua scripts, loaded once per store. On Redis they are invoked by SHA (EVALSHA,
//! falling back to EVAL); the embedded engine compiles each once by name.

pub(crate) use crate::engine::ScriptDef;

const PRELUDE: &str = include_str!("lua/_prelude.lua");

/// Lines of the prelude every script starts with (its body starts on the second line after).
#[cfg(feature = "embedded")]
pub(crate) fn prelude_lines() -> u32 {
    PRELUDE.matches('\n').count() as u32
}

/// Every script as the engines run it (prelude included), by name.
#[cfg(feature = "embedded")]
pub(crate) fn sources() -> Vec<(&'static str, String)> {
    Scripts::new()
        .all()
        .into_iter()
        .map(|s| (s.name, s.body.clone()))
        .collect()
}

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

            /// Every script (the embedded engine's lint of the commands they use, coverage).
            #[cfg(feature = "embedded")]
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
    pause_run,
    unpark,
    pause_put,
    event,
    note,
    child_link,
    flow_acquire,
    flow_release,
    flow_extend,
    flow_line,
    signal,
    cancel,
    unblock,
    retry,
    forget_feature,
    output_version,
    restart,
    fork,
    sched_put,
    sched_advance,
    sched_unbuffer,
    sched_state,
    reseal,
    sched_settle,
    due_candidates,
    ring,
    mark_queued,
    effect_begin,
    effect_intent,
    effect_done,
    effect_release,
    effect_unused,
    effect_orphan,
    effect_reopen,
    effect_forget,
    effect_expire,
    register_worker,
    live_workers,
    wake_unserved,
    schedulers,
    audit,
);

#[cfg(all(test, feature = "embedded"))]
mod tests {
    use super::Scripts;
    use std::collections::BTreeSet;

    /// The embedded engine runs these very files: every command they send must be one the
    /// embedded keyspace implements, and no other part of Redis's Lua API may creep in.
    #[test]
    fn every_command_the_scripts_send_is_implemented_by_the_embedded_keyspace() {
        let scripts = Scripts::new();
        let mut verbs = BTreeSet::new();
        for s in scripts.all() {
            assert_eq!(
                s.body.matches("redis.call(").count(),
                s.body.matches("redis.call('").count(),
                "{}: every redis.call names its command as a literal",
                s.name
            );
            for part in s.body.split("redis.call('").skip(1) {
                verbs.insert(part.split('\'').next().unwrap_or_default().to_owned());
            }
            let other: Vec<&str> = s
                .body
                .match_indices("redis.")
                .map(|(i, _)| &s.body[i..])
                .filter(|rest| !rest.starts_with("redis.call("))
                .collect();
            assert!(other.is_empty(), "{} uses more of the Redis Lua API: {other:?}", s.name);
        }
        assert!(verbs.len() >= 20, "{verbs:?}");
        let mut ks = crate::mem::keyspace::Keyspace::default();
        for v in &verbs {
            let r = ks.exec(&[v.as_bytes().to_vec()], 0, 0);
            assert!(
                !matches!(&r, Err(e) if e.contains("unknown command")),
                "{v} is sent by a script but not implemented by the embedded keyspace"
            );
        }
    }
}
