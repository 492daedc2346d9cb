-- scan_due: hand out overdue runs of one partition, each to exactly one scanner per period.
-- KEYS: 1 partition due zset
-- ARGV: 1 limit, 2 period_ms (how long before the same run may be handed out again)
-- Returns: {server_now_ms, thread ids...}
-- Effects: every returned run's due score moves to now + period, atomically, so concurrent
-- scheduler replicas never both publish the same run within one period.
local t = now_ms()
local ids = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', t, 'LIMIT', 0, tonumber(ARGV[1]))
local next_due = t + tonumber(ARGV[2])
for _, id in ipairs(ids) do redis.call('ZADD', KEYS[1], next_due, id) end
table.insert(ids, 1, t)
return ids
