-- flow_release: a slice gives its slot of a flow-controlled key back (the slice ended), or a
-- run that ended leaves the line; answers the runs at the head of the line that may take the
-- slots free now (the caller publishes their tasks: nobody polls the broker for a slot).
-- Only the slice that holds the slot (its fencing token in the holders hash) frees it: a
-- slice whose run was claimed again meanwhile (it yielded, or it was paused past its lease)
-- leaves its successor's slot alone. An empty fence frees no slot (a cancel: the slice in
-- flight, if any, gives its slot back when it ends, or its lease expires).
-- Each slot given back moves the key's turnover (KEYS[5]: the time of the last release and a
-- moving mean of the gap between two, `at` and `gap` ms), the rate a line moves at
-- (flow_line.lua: the estimate of a waiting run's turn).
-- KEYS: 1 the key's slots zset, 2 its waiting line zset, 3 its last-seen zset,
--       4 the slots' holders (thread -> fence), 5 its turnover hash
-- ARGV: 1 thread id, 2 limit, 3 '1' if the run ended (it leaves the line too),
--       4 the slice's fencing token ('' = none)
-- Returns: {thread, ...} to wake
local t = now_ms()
if ARGV[4] ~= '' and redis.call('HGET', KEYS[4], ARGV[1]) == ARGV[4] then
  redis.call('ZREM', KEYS[1], ARGV[1])
  redis.call('HDEL', KEYS[4], ARGV[1])
  local turn = redis.call('HMGET', KEYS[5], 'at', 'gap')
  local last = tonumber(turn[1] or '')
  if last then
    local gap = math.max(0, t - last)
    local mean = tonumber(turn[2] or '')
    if mean then gap = math.floor(mean * 0.8 + gap * 0.2) end
    redis.call('HSET', KEYS[5], 'at', t, 'gap', gap)
  else
    redis.call('HSET', KEYS[5], 'at', t)
  end
  -- A key's turnover lives an hour past its last release (a line that has not moved for that
  -- long has no pace to estimate by; keys come and go with their runs).
  redis.call('PEXPIRE', KEYS[5], 3600000)
end
if ARGV[3] == '1' then
  redis.call('ZREM', KEYS[2], ARGV[1])
  redis.call('ZREM', KEYS[3], ARGV[1])
end
for _, s in ipairs(redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', t)) do
  redis.call('HDEL', KEYS[4], s)
end
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', t)
local free = tonumber(ARGV[2]) - redis.call('ZCARD', KEYS[1])
if free <= 0 then return {} end
return redis.call('ZRANGE', KEYS[2], 0, free - 1)
