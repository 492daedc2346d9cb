-- output_version: an operator says at which version of its type the output of a run's child
-- call was written, for a child a build from before 2026-12-07 completed without recording
-- one: the run (the parent) blocks on such an output rather than guess, and reads it from this
-- version once retried (shared/src/workflow/ctx.rs, `unrecorded_output`). Kept beside the
-- child's word in the parent's signals hash (`v:child:<index>`, a JSON string), so it holds
-- whether or not the child's own record is still there; a later answer replaces an earlier
-- one (the parent reads it only while it has not journaled the output).
-- KEYS: 1 run hash, 2 run signals hash, 3 run event list
-- ARGV: 1 the call's journal index, 2 the version, `<type>@<version>`, 3 event cap,
--       4 event detail
-- Returns: {'ok'} | {'missing'} | {'ended', status}
local status = redis.call('HGET', KEYS[1], 'status')
if not status then return { 'missing' } end
if status == 'completed' or status == 'failed' or status == 'cancelled' then return { 'ended', status } end
local t = now_ms()
redis.call('HSET', KEYS[2], 'v:child:' .. ARGV[1], cjson.encode(ARGV[2]))
redis.call('HSET', KEYS[1], 'updated', t)
event(KEYS[3], ARGV[3], 'output_version_set', ARGV[4], t)
return { 'ok' }
