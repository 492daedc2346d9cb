-- retry: an operator re-queues a blocked run after a fix (code deployed, version served):
-- the worker that claims it checks it again from the top. A run blocked on an in-doubt
-- effect is settled with resolve instead (retrying it would only block it again).
-- KEYS: 1 run hash, 2 partition due zset, 3 run event list, 4 partition blocked index
-- ARGV: 1 thread id, 2 redeliver_ms, 3 event cap, 4 event detail
-- Returns: {'ok', rv, trace} | {'missing'} | {'not_blocked', status} | {'effect', key}
local h = redis.call('HMGET', KEYS[1], 'status', 'blocked_fx', 'ver')
if not h[1] then return { 'missing' } end
if h[1] ~= 'blocked' then return { 'not_blocked', h[1] } end
if h[2] and h[2] ~= '' then return { 'effect', h[2] } end
local t = now_ms()
local due = t + tonumber(ARGV[2])
redis.call('HSET', KEYS[1], 'status', 'pending', 'ver', tonumber(h[3]) + 1, 'updated', t, 'due', due,
  'crashes', 0)
redis.call('HDEL', KEYS[1], 'reason', 'bk', 'finished', 'crashed_by', 'cstep', 'cur')
redis.call('ZADD', KEYS[2], due, ARGV[1])
redis.call('ZREM', KEYS[4], ARGV[1])
event(KEYS[3], ARGV[3], 'retried_by_operator', ARGV[4], t)
-- A new due regime: a task published before it (rv seen then) must not mark this run queued.
local rv = redis.call('HINCRBY', KEYS[1], 'rv', 1)
local w = { tostring(rv), redis.call('HGET', KEYS[1], 'trace') }
return { 'ok', w[1] or '0', w[2] or '' }
