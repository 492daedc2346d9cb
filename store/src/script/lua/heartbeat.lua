-- heartbeat: extend the lease of a long step. Does not bump the version, so the step's own
-- commit (which compares versions) is not disturbed; the fence alone proves ownership.
-- KEYS: 1 run hash, 2 partition due zset, 3 partition pause hash
-- ARGV: 1 thread id, 2 owner, 3 fence, 4 lease_ms, 5 grace_ms
-- Returns: {'ok', lease_until, paused} | {'missing'} | {'fenced', status, owner, fence}:
-- `paused` is the pause now holding the run ('' = none; see pause_text): the slice yields at
-- its next call, and the next claim stops the run.
local bad = check_lease(KEYS[1], ARGV[2], ARGV[3], '')
if bad then return bad end
local t = now_ms()
local lease = t + tonumber(ARGV[4])
redis.call('HSET', KEYS[1], 'lease', lease, 'due', lease + tonumber(ARGV[5]))
redis.call('ZADD', KEYS[2], lease + tonumber(ARGV[5]), ARGV[1])
local p = redis.call('HMGET', KEYS[1], 'pz', 'wf', 'wfv', 'q')
local pz, field = pause_of(p[1], KEYS[3], p[2] or '', p[3] or '0', p[4] or '')
return { 'ok', lease, pz and pause_text(field, pz) or '' }
