-- ring: hand out overdue runs of one partition to exactly one scanner per period. The
-- caller read the candidates with due_candidates; this re-checks each atomically, so two
-- scheduler replicas racing on a partition never both publish the same run.
-- KEYS: 1 partition due zset, 2 partition unconfirmed-start zset, 3.. the candidates' run
--       hashes (same slot; KEYS[i + 1] is the hash of ARGV[i])
-- ARGV: 1 period_ms (how long before the same run may be handed out again), 2.. thread ids
-- Returns: {server_now_ms, thread, trace, recorded due, rv, task queue ('' = default), holder
--          ('' = none), thread, …} for the runs handed out; the holder is the worker that
--          suspended the run keeping its body or journal (`held`), whose sticky queue its task
--          goes to, named only for a run that is not running (one whose lease expired has no
--          live holder to wait for) and on the first ring since the run's last claim
-- Effects: every handed-out run's due score moves to now + period (the hash keeps its due),
-- its unconfirmed-start entry is dropped, and its `rings` count grows by one.
local t = now_ms()
local next_due = t + tonumber(ARGV[1])
local out = { t }
for i = 2, #ARGV do
  local id = ARGV[i]
  local score = redis.call('ZSCORE', KEYS[1], id)
  local unconfirmed = redis.call('ZSCORE', KEYS[2], id)
  if (score and tonumber(score) <= t) or (unconfirmed and tonumber(unconfirmed) <= t) then
    local h = redis.call('HMGET', KEYS[i + 1], 'trace', 'due', 'rv', 'status', 'q', 'held', 'rings')
    redis.call('ZREM', KEYS[2], id)
    if score then redis.call('ZADD', KEYS[1], next_due, id) end
    -- One more ring since the last claim (mark_queued doubles its wait per ring).
    if h[4] then redis.call('HINCRBY', KEYS[i + 1], 'rings', 1) end
    table.insert(out, id)
    table.insert(out, h[1] or '')
    table.insert(out, h[2] or '')
    table.insert(out, h[3] or '0')
    table.insert(out, h[5] or '')
    -- The holder's sticky queue on the first ring since the last claim only: a task there does
    -- not mark the run queued, so a run rung again was not taken there (its worker busy or
    -- gone), and this ring goes to the task queue, which marks it (one extra task at most).
    local first = tonumber(h[7] or '0') == 0
    table.insert(out, (h[4] ~= 'running' and first and h[6]) or '')
  end
end
return out
