-- due_candidates: the overdue runs of one partition (read only); ring.lua then hands them
-- out atomically, with their run hashes declared as keys.
-- KEYS: 1 partition due zset
-- ARGV: 1 limit
-- Returns: {server_now_ms, thread ids...}
local t = now_ms()
local ids = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', t, 'LIMIT', 0, tonumber(ARGV[1]))
table.insert(ids, 1, t)
return ids
