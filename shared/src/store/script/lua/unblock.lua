-- unblock: after an operator settled an in-doubt effect, make the blocked run runnable again.
-- KEYS: 1 run hash, 2 partition due zset, 3 run event list, 4 partition blocked index
-- ARGV: 1 thread id, 2 effect key the run is blocked on, 3 redeliver_ms, 4 event cap,
--       5 event detail
-- Returns: {'ok', rv, trace} | {'missing'} | {'not_blocked', status, blocked effect key}
local h = redis.call('HMGET', KEYS[1], 'status', 'blocked_fx', 'ver')
if not h[1] then return { 'missing' } end
if h[1] ~= 'blocked' or h[2] ~= ARGV[2] then return { 'not_blocked', h[1], h[2] or '' } end
local t = now_ms()
local due = t + tonumber(ARGV[3])
redis.call('HSET', KEYS[1], 'status', 'pending', 'ver', tonumber(h[3]) + 1, 'updated', t, 'due', due)
redis.call('HDEL', KEYS[1], 'reason', 'blocked_fx', 'blocked_fx_owner', 'finished')
redis.call('ZADD', KEYS[2], due, ARGV[1])
redis.call('ZREM', KEYS[4], ARGV[1])
event(KEYS[3], ARGV[4], 'effect_resolved', ARGV[5], t)
-- A new due regime: a task published before it (rv seen then) must not mark this run queued.
local rv = redis.call('HINCRBY', KEYS[1], 'rv', 1)
local w = { tostring(rv), redis.call('HGET', KEYS[1], 'trace') }
return { 'ok', w[1] or '0', w[2] or '' }
