-- ring: hand out overdue runs of one partition to exactly one scanner per period. The
-- caller read the candidates with ZRANGEBYSCORE; this re-checks each atomically, so two
-- scheduler replicas racing on a partition never both publish the same run.
-- KEYS: 1 partition due zset, 2.. the candidates' run hashes (same slot)
-- ARGV: 1 period_ms (how long before the same run may be handed out again), 2.. thread ids
-- Returns: {server_now_ms, thread, trace, recorded due, rv, thread, …} for the runs handed out
-- Effects: every handed-out run's due score moves to now + period (the hash keeps its due);
-- its `rings` count grows by one.
local t = now_ms()
local next_due = t + tonumber(ARGV[1])
local out = { t }
for i = 2, #ARGV do
  local id = ARGV[i]
  local score = redis.call('ZSCORE', KEYS[1], id)
  if score and tonumber(score) <= t then
    redis.call('ZADD', KEYS[1], next_due, id)
    local h = redis.call('HMGET', KEYS[i], 'trace', 'due', 'rv', 'status')
    -- One more ring since the last claim (mark_queued doubles its wait per ring).
    if h[4] then redis.call('HINCRBY', KEYS[i], 'rings', 1) end
    table.insert(out, id)
    table.insert(out, h[1] or '')
    table.insert(out, h[2] or '')
    table.insert(out, h[3] or '0')
  end
end
return out
