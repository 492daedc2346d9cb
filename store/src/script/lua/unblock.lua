-- unblock: after an operator settled an in-doubt effect, make the blocked run runnable again.
-- KEYS: 1 run hash, 2 partition due zset, 3 run event list, 4 partition blocked index
-- ARGV: 1 thread id, 2 effect key the run is blocked on, 3 redeliver_ms, 4 event cap,
--       5 event detail
-- Returns: {'ok', rv, trace} | {'missing'} | {'not_blocked', status, blocked effect key}
local h = redis.call('HMGET', KEYS[1], 'status', 'blocked_fx', 'ver')
if not h[1] then return { 'missing' } end
if h[1] ~= 'blocked' or h[2] ~= ARGV[2] then return { 'not_blocked', h[1], h[2] or '' } end
local rv, trace = unblock_run(KEYS[1], KEYS[2], KEYS[3], KEYS[4], ARGV[1], h[3], ARGV[3], ARGV[4], ARGV[5])
return { 'ok', rv, trace }
