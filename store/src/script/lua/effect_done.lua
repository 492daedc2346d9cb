-- effect_done: mark an effect applied and keep its result, so any later attempt (a resumed
-- run, a redelivered task, another run with the same key) records the result instead of
-- repeating the effect. The done record has no expiry while it is the only proof the effect
-- happened: until the run journals its entry (the worker then gives it the effect TTL, the
-- dedup window), or the run ends without journaling it (its cancel gives it the TTL:
-- effect_orphan). A run stopped for any time (paused, blocked, poisoned, given back) keeps
-- it, however long the stop.
-- KEYS: 1 effect dedup record
-- ARGV: 1 thread id, 2 journal index ('' = operator), 3 fence, 4 result (JSON),
--       5 operator only: the holder it settles, 'thread\31index\31fence' ('' = any)
-- Returns: {'ok'} | {'already', result JSON} (was done before: keep the first result)
--        | {'not_owner', holder thread} | {'stale', holder fence} (a newer attempt holds it)
--        | {'changed', holder} (operator: the record is no longer the one named)
local cur = redis.call('GET', KEYS[1])
local v = cur and cjson.decode(cur)
if v and v.state == 'done' then return { 'already', v.result } end
if ARGV[2] == '' then
  if not v then return { 'changed', '' } end
  local holder = v.thread .. '\31' .. tostring(v.index) .. '\31' .. tostring(v.fence)
  if ARGV[5] ~= '' and holder ~= ARGV[5] then return { 'changed', holder } end
elseif v then
  if v.thread ~= ARGV[1] or tonumber(v.index) ~= tonumber(ARGV[2]) then
    return { 'not_owner', v.thread }
  end
  if tonumber(v.fence) > tonumber(ARGV[3]) then return { 'stale', tostring(v.fence) } end
end
-- (No record at all for a worker: an operator released it meanwhile, but this worker did
-- apply the effect, so recording it is the truth and prevents a repeat.)
redis.call('SET', KEYS[1], cjson.encode({ state = 'done', thread = ARGV[1],
  index = tonumber(ARGV[2]) or -1, fence = tonumber(ARGV[3]) or 0, result = ARGV[4],
  at = now_ms() }))
return { 'ok' }
