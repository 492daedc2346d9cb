-- flow_line: read-only, where a run stands in its flow-control key's line (the waiting cause
-- of a run in line: `GET /v1/runs/{id}`, the doctor, `?waiting_on=`). Writes nothing.
-- KEYS: 1 the key's slots zset, 2 its waiting line zset, 3 its rate bucket hash,
--       4 its turnover hash (flow_release.lua)
-- ARGV: 1 thread id
-- Returns: {rank or '' (not in line), in line, slots held (unexpired), tokens or '',
--           tokens' time or '', last release ms or '', mean gap between releases ms or '', now}
local t = now_ms()
local rank = redis.call('ZRANK', KEYS[2], ARGV[1])
local held = redis.call('ZCARD', KEYS[1]) - #redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', t)
local b = redis.call('HMGET', KEYS[3], 'tokens', 'at')
local r = redis.call('HMGET', KEYS[4], 'at', 'gap')
return { rank and tostring(rank) or '', tostring(redis.call('ZCARD', KEYS[2])), tostring(held),
  b[1] or '', b[2] or '', r[1] or '', r[2] or '', tostring(t) }
