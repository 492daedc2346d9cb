-- effect_begin: before taking an effect's intent, record its key at the journal index in
-- the run itself (field x:<index>), so cancel can settle the intents a run holds and a
-- resumed run that reaches the index with a different key is caught as non-determinism.
-- Extends the lease like a commit; does not bump the version.
-- KEYS: 1 run hash, 2 partition due zset
-- ARGV: 1 thread id, 2 owner, 3 fence, 4 journal index, 5 effect key, 6 lease_ms, 7 grace_ms,
--       8 effect name (kept as n:<index>, so the API knows which result schema a resolve of
--       this key must match)
-- Returns: {'ok', lease_until} | {'key_changed', key recorded at this index}
--        | {'missing'} | {'fenced', status, owner, fence} | {'index', steps}
local bad = check_lease(KEYS[1], ARGV[2], ARGV[3], '')
if bad then return bad end
local steps = tonumber(redis.call('HGET', KEYS[1], 'steps'))
-- (Inside a parallel group the index runs ahead of the journal; one already journaled is stale.)
if tonumber(ARGV[4]) < steps then return { 'index', steps } end
local field = 'x:' .. ARGV[4]
local old = redis.call('HGET', KEYS[1], field)
if old and old ~= ARGV[5] then return { 'key_changed', old } end
local t = now_ms()
local lease = t + tonumber(ARGV[6])
local due = lease + tonumber(ARGV[7])
redis.call('HSET', KEYS[1], field, ARGV[5], 'n:' .. ARGV[4], ARGV[8], 'lease', lease, 'due', due)
redis.call('ZADD', KEYS[2], due, ARGV[1])
return { 'ok', lease }
