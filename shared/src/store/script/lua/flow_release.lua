-- flow_release: a run gives its slot of a flow-controlled key back (its slice ended), or a
-- run that ended leaves the line; answers the runs at the head of the line that may take the
-- slots free now (the caller publishes their tasks: nobody polls the broker for a slot).
-- KEYS: 1 the key's slots zset, 2 its waiting line zset, 3 its last-seen zset
-- ARGV: 1 thread id, 2 limit, 3 '1' if the run ended (it leaves the line too)
-- Returns: {thread, ...} to wake
local t = now_ms()
redis.call('ZREM', KEYS[1], ARGV[1])
if ARGV[3] == '1' then
  redis.call('ZREM', KEYS[2], ARGV[1])
  redis.call('ZREM', KEYS[3], ARGV[1])
end
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', t)
local free = tonumber(ARGV[2]) - redis.call('ZCARD', KEYS[1])
if free <= 0 then return {} end
return redis.call('ZRANGE', KEYS[2], 0, free - 1)
