-- unpark: after a workflow, version or queue pause was lifted, put back the runs of one
-- partition that no pause holds any more (§16b). The caller reads a page of the paused index
-- and names its runs; a run still held (its own pause, or another workflow, version or queue
-- pause) stays stopped, and a member that is no longer paused (cancelled meanwhile, expired)
-- leaves the index.
-- KEYS: 1 partition pause hash, 2 partition due zset, 3 partition waiting index,
--       4 partition paused index, then for each run: its hash, its event list
-- ARGV: 1 event cap, 2 event detail (who and why), 3 workflow whose runs move to a version
--       ('' = none), 4 that version ('' = keep; a run already at it or newer keeps its own),
--       5.. the thread ids, in KEYS order
-- Returns: {put back, still held}
local t = now_ms()
local back, kept = 0, 0
for i = 5, #ARGV do
  local run, ev = KEYS[5 + (i - 5) * 2], KEYS[6 + (i - 5) * 2]
  local h = redis.call('HMGET', run, 'status', 'pz', 'wf', 'wfv', 'q')
  if h[1] ~= 'paused' then
    redis.call('ZREM', KEYS[4], ARGV[i])
  elseif pause_of(h[2], KEYS[1], h[3] or '', h[4] or '0', h[5] or '') then
    kept = kept + 1
  else
    local newer = ARGV[4] ~= '' and tonumber(h[4] or '0') < tonumber(ARGV[4])
    local version = (ARGV[3] ~= '' and h[3] == ARGV[3] and newer) and ARGV[4] or ''
    unpark(run, ev, KEYS[2], KEYS[3], KEYS[4], ARGV[i], ARGV[1], version, ARGV[2], t)
    back = back + 1
  end
end
return { back, kept }
