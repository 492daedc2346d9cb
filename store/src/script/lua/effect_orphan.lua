-- effect_orphan: the run holding an intent ended (cancelled, expired) without settling it.
-- The intent becomes an explicit in-doubt record that names its owner; a run that meets it
-- is blocked until an operator says whether the effect happened (never silently retried,
-- never spinning).
-- KEYS: 1 effect dedup record
-- ARGV: 1 owner thread id, 2 journal index, 3 owner status (cancelled | missing | …)
-- Returns: {'ok'} | {'no', state} (not an intent of that owner: nothing changed)
local cur = redis.call('GET', KEYS[1])
if not cur then return { 'no', 'absent' } end
local v = cjson.decode(cur)
if v.state ~= 'intent' or v.thread ~= ARGV[1] or tonumber(v.index) ~= tonumber(ARGV[2]) then
  return { 'no', v.state }
end
v.state = 'orphaned'
v.owner_status = ARGV[3]
v.orphaned_at = now_ms()
redis.call('SET', KEYS[1], cjson.encode(v))
return { 'ok' }
