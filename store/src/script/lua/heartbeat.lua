-- heartbeat: extend the lease of a long step. Does not bump the version, so the step's own
-- commit (which compares versions) is not disturbed; the fence alone proves ownership.
-- KEYS: 1 run hash, 2 partition due zset
-- ARGV: 1 thread id, 2 owner, 3 fence, 4 lease_ms, 5 grace_ms
-- Returns: {'ok', lease_until} | {'missing'} | {'fenced', status, owner, fence}
local bad = check_lease(KEYS[1], ARGV[2], ARGV[3], '')
if bad then return bad end
local t = now_ms()
local lease = t + tonumber(ARGV[4])
redis.call('HSET', KEYS[1], 'lease', lease, 'due', lease + tonumber(ARGV[5]))
redis.call('ZADD', KEYS[2], lease + tonumber(ARGV[5]), ARGV[1])
return { 'ok', lease }
