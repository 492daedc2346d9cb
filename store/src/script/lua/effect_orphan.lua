-- effect_orphan: the run holding an intent ended (cancelled, expired) without settling it.
-- The intent becomes an explicit in-doubt record that names its owner; a run that meets it
-- is blocked until an operator says whether the effect happened (never silently retried,
-- never spinning).
-- A done record of that owner at that index, or settled for it by an operator or a reconcile
-- (index -1), whose entry was never journaled, is proof no run of that owner needs any more:
-- it gets the effect TTL (the dedup window) instead of living on.
-- KEYS: 1 effect dedup record
-- ARGV: 1 owner thread id, 2 journal index, 3 owner status (cancelled | missing | …), 4 ttl_ms
-- Returns: {'ok'} | {'no', state} (not an intent of that owner: nothing else changed)
local cur = redis.call('GET', KEYS[1])
if not cur then return { 'no', 'absent' } end
local v = cjson.decode(cur)
local mine = v.thread == ARGV[1] and tonumber(v.index) == tonumber(ARGV[2])
local settled = v.thread == ARGV[1] and tonumber(v.index) == -1
if v.state == 'done' and (mine or settled) and redis.call('PTTL', KEYS[1]) < 0 then
  redis.call('PEXPIRE', KEYS[1], ARGV[4])
end
if v.state ~= 'intent' or not mine then
  return { 'no', v.state }
end
v.state = 'orphaned'
v.owner_status = ARGV[3]
v.orphaned_at = now_ms()
redis.call('SET', KEYS[1], cjson.encode(v))
return { 'ok' }
