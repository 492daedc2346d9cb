//! The store as a workflow context sees it: [`RunStore`] for [`ScriptStore`], each method
//! the store's own operation of the same name.

use serde_json::Value;

use savepoint_core::seam::{BoxFut, RunStore, StoreResult, StoreTimings};

use super::{
    CreateOptions, CreateOutcome, EffectClaim, EffectDone, EffectRecord, EffectRelease, EffectUnused, Finish, Holder,
    Lease, ParentCancel, RunHeader, ScriptStore, Suspend, Suspended,
};
use savepoint_core::ids::{EffectKey, ThreadId};
use savepoint_core::journal::Entry;

impl RunStore for ScriptStore {
    fn timings(&self) -> StoreTimings {
        let c = self.config();
        StoreTimings {
            command_timeout: c.command_timeout,
            redeliver: c.redeliver,
            child_poll: c.child_poll,
        }
    }

    fn commit<'a>(
        &'a self,
        lease: &'a mut Lease,
        first: u32,
        entries: &'a [Entry],
        event: (&'a str, &'a str),
        consume_signal: Option<&'a str>,
    ) -> BoxFut<'a, StoreResult<()>> {
        Box::pin(ScriptStore::commit(self, lease, first, entries, event, consume_signal))
    }

    fn suspend<'a>(
        &'a self,
        lease: &'a mut Lease,
        entries: Option<(u32, &'a [Entry])>,
        how: Suspend<'a>,
        event: (&'a str, &'a str),
    ) -> BoxFut<'a, StoreResult<Suspended>> {
        Box::pin(ScriptStore::suspend(self, lease, entries, how, event))
    }

    fn finish<'a>(
        &'a self,
        lease: &'a mut Lease,
        entries: Option<(u32, &'a [Entry])>,
        how: Finish<'a>,
        event: (&'a str, &'a str),
    ) -> BoxFut<'a, StoreResult<()>> {
        Box::pin(ScriptStore::finish(self, lease, entries, how, event))
    }

    fn note<'a>(&'a self, lease: &'a Lease, field: &'a str, value: &'a str) -> BoxFut<'a, StoreResult<()>> {
        Box::pin(ScriptStore::note(self, lease, field, value))
    }

    fn event<'a>(&'a self, lease: &'a Lease, typ: &'a str, detail: &'a str) -> BoxFut<'a, StoreResult<()>> {
        Box::pin(ScriptStore::event(self, lease, typ, detail))
    }

    fn retried<'a>(
        &'a self,
        lease: &'a Lease,
        index: u32,
        attempt: u32,
        detail: &'a str,
        backoff: Option<std::time::Duration>,
    ) -> BoxFut<'a, StoreResult<()>> {
        Box::pin(ScriptStore::retried(self, lease, index, attempt, detail, backoff))
    }

    fn effect_begin<'a>(
        &'a self,
        lease: &'a Lease,
        index: u32,
        key: &'a EffectKey,
        name: &'a str,
    ) -> BoxFut<'a, StoreResult<Option<String>>> {
        Box::pin(ScriptStore::effect_begin(self, lease, index, key, name))
    }

    fn effect_intent<'a>(
        &'a self,
        key: &'a EffectKey,
        thread: &'a ThreadId,
        index: u32,
        fence: u64,
        takeover: bool,
    ) -> BoxFut<'a, StoreResult<EffectClaim>> {
        Box::pin(ScriptStore::effect_intent(self, key, thread, index, fence, takeover))
    }

    fn effect_done<'a>(
        &'a self,
        key: &'a EffectKey,
        thread: &'a ThreadId,
        index: u32,
        fence: u64,
        result: &'a Value,
    ) -> BoxFut<'a, StoreResult<EffectDone>> {
        Box::pin(ScriptStore::effect_done(self, key, thread, index, fence, result))
    }

    fn effect_release<'a>(
        &'a self,
        key: &'a EffectKey,
        thread: &'a ThreadId,
        index: u32,
        fence: u64,
    ) -> BoxFut<'a, StoreResult<EffectRelease>> {
        Box::pin(ScriptStore::effect_release(self, key, thread, index, fence))
    }

    fn effect_reopen<'a>(
        &'a self,
        key: &'a EffectKey,
        thread: &'a ThreadId,
        index: u32,
        fence: u64,
    ) -> BoxFut<'a, StoreResult<bool>> {
        Box::pin(ScriptStore::effect_reopen(self, key, thread, index, fence))
    }

    fn effect_unused<'a>(
        &'a self,
        thread: &'a ThreadId,
        index: u32,
        fence: u64,
    ) -> BoxFut<'a, StoreResult<EffectUnused>> {
        Box::pin(ScriptStore::effect_unused(self, thread, index, fence))
    }

    fn settle_done<'a>(
        &'a self,
        key: &'a EffectKey,
        thread: &'a ThreadId,
        result: &'a Value,
        expect: Option<&'a Holder>,
    ) -> BoxFut<'a, StoreResult<EffectDone>> {
        Box::pin(ScriptStore::settle_done(self, key, thread, result, expect))
    }

    fn effect_orphan<'a>(
        &'a self,
        key: &'a EffectKey,
        owner: &'a ThreadId,
        index: u32,
        owner_status: &'a str,
    ) -> BoxFut<'a, StoreResult<bool>> {
        Box::pin(ScriptStore::effect_orphan(self, key, owner, index, owner_status))
    }

    fn effect_state<'a>(&'a self, key: &'a EffectKey) -> BoxFut<'a, StoreResult<Option<EffectRecord>>> {
        Box::pin(ScriptStore::effect_state(self, key))
    }

    fn effect_keep<'a>(&'a self, key: &'a EffectKey) -> BoxFut<'a, StoreResult<()>> {
        Box::pin(ScriptStore::effect_keep(self, key))
    }

    fn effect_expire<'a>(
        &'a self,
        key: &'a EffectKey,
        thread: &'a ThreadId,
        index: u32,
    ) -> BoxFut<'a, StoreResult<bool>> {
        Box::pin(ScriptStore::effect_expire(self, key, thread, index))
    }

    fn header<'a>(&'a self, thread: &'a ThreadId) -> BoxFut<'a, StoreResult<Option<RunHeader>>> {
        Box::pin(ScriptStore::header(self, thread))
    }

    fn child_link<'a>(
        &'a self,
        lease: &'a Lease,
        index: u32,
        child: &'a ThreadId,
        on_parent_cancel: ParentCancel,
        detail: &'a str,
    ) -> BoxFut<'a, StoreResult<()>> {
        Box::pin(ScriptStore::child_link(
            self,
            lease,
            index,
            child,
            on_parent_cancel,
            detail,
        ))
    }

    fn create_with<'a>(
        &'a self,
        thread: &'a ThreadId,
        workflow: &'a str,
        workflow_version: u32,
        input: &'a str,
        trace: &'a str,
        opts: &'a CreateOptions,
    ) -> BoxFut<'a, StoreResult<CreateOutcome>> {
        Box::pin(ScriptStore::create_with(
            self,
            thread,
            workflow,
            workflow_version,
            input,
            trace,
            opts,
        ))
    }
}
