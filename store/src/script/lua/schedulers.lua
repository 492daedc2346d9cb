-- schedulers: a scheduler replica says it is alive (or leaving); returns the live replicas,
-- from which each replica works out, by itself, which partitions its due scanner scans
-- (rendezvous hashing: no leader, no election, nothing to hand over).
-- KEYS: 1 scheduler replicas sorted set (member = replica id, score = expiry ms)
-- ARGV: 1 replica id, 2 ttl_ms (0 = leaving: remove it)
-- Returns: {now ms, live replica ids…}
local t = now_ms()
if tonumber(ARGV[2]) == 0 then
  redis.call('ZREM', KEYS[1], ARGV[1])
else
  redis.call('ZADD', KEYS[1], t + tonumber(ARGV[2]), ARGV[1])
end
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', t)
local out = { tostring(t) }
for _, id in ipairs(redis.call('ZRANGE', KEYS[1], 0, -1)) do out[#out + 1] = id end
return out
