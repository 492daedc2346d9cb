-- mark_queued: the broker confirmed a task for these runs, so the queue now carries their
-- work; push each run's safety-net due time out to when the message could really have been
-- lost (queued_redeliver, doubling with every ring since the last claim, capped). Skipped for a run
-- that a worker has claimed, given back or been refused since (its ring version moved on), that
-- no longer has a due time (waiting, ended), or whose lease is live (its holder carries its work,
-- not the queue: a claim of the task is refused `leased` and drops it, and the lease's expiry
-- plus grace, which every lease extension writes, is the run's safety net), so a consumed task
-- never delays recovery.
-- KEYS: 1 partition due zset, 2.. the runs' hashes (same slot)
-- ARGV: 1 base_ms, 2 cap_ms, then per run: thread id, rv seen by the publisher
-- Returns: number of runs marked
local t = now_ms()
local base, cap = tonumber(ARGV[1]), tonumber(ARGV[2])
local marked = 0
for i = 2, #KEYS do
  local id, rv = ARGV[2 * i - 1], ARGV[2 * i]
  local h = redis.call('HMGET', KEYS[i], 'status', 'rv', 'rings', 'due', 'lease')
  local runnable = h[1] == 'pending' or h[1] == 'sleeping'
    or (h[1] == 'running' and tonumber(h[5] or '0') <= t)
  if runnable and h[4] and (h[2] or '0') == rv then
    -- `rings` counts the scanner's rings since the last claim (ring.lua): each one that went
    -- unanswered doubles the wait.
    local n = tonumber(h[3] or '0')
    local due = t + math.min(base * (2 ^ math.min(n, 20)), cap)
    -- Only the scanner's score moves: the hash keeps the run's own due time (a sleeper's
    -- wake time, which claim checks).
    redis.call('ZADD', KEYS[1], due, id)
    marked = marked + 1
  end
end
return marked
