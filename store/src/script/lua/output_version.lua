-- output_version: an operator says at which version of its type a completed run's output was
-- written, for a run completed by a build from before 2026-12-07 (no `ov` recorded): a parent
-- whose code reads a later version of the type blocks on such an output rather than guess,
-- and reads it from this version once retried (shared/src/workflow/ctx.rs,
-- `unrecorded_output`). A recorded version is never replaced.
-- KEYS: 1 run hash, 2 run event list
-- ARGV: 1 the version, `<type>@<version>`, 2 event cap, 3 event detail
-- Returns: {'ok'} | {'missing'} | {'not_completed', status} | {'recorded', ov}
local h = redis.call('HMGET', KEYS[1], 'status', 'ov')
if not h[1] then return { 'missing' } end
if h[1] ~= 'completed' then return { 'not_completed', h[1] } end
if h[2] and h[2] ~= '' then return { 'recorded', h[2] } end
local t = now_ms()
redis.call('HSET', KEYS[1], 'ov', ARGV[1], 'updated', t)
event(KEYS[2], ARGV[2], 'output_version_set', ARGV[3], t)
return { 'ok' }
