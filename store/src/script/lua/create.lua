-- create: start a run, or find the one that already has this thread id.
-- KEYS: 1 run hash, 2 partition due zset, 3 run event list, 4 partition run index,
--       5 partition index of runs whose start task is not confirmed yet
-- ARGV: 1 thread id, 2 workflow name, 3 workflow version, 4 checkpoint schema version,
--       5 input (JSON), 6 redeliver_ms (safety-net due delay), 7 event cap, 8 trace context,
--       9 retention_ms (index entries older than this are trimmed),
--       10 queued_redeliver_ms (the safety net once the start task is confirmed),
--       11 run timeout ms ('' = none): the run fails when server time passes created + this
--          (the `deadline` field; suspend.lua bounds every due time by it),
--       12 parent thread id ('' = none: not a child run), 13 the parent's call index,
--       14 task queue ('' = the default): the run's home queue (`hq`) and the queue its
--          next task goes to (`q`),
--       15 flow-control key ('' = none), 16 its limit, 17 its starts per second ('' = none),
--       18 priority (0-9) in the key's waiting line,
--       19 the run features it needs, joined by \31 ('' = none): a worker whose claim does not
--          name one of them gives the run back to wait for one that does (claim.lua),
--       20 the version of the input's type ('' = 1, not written)
-- The caller publishes the start task next. Its due score is already the one for a queued
-- task (a confirm then costs one ZREM of the `unconfirmed` entry, not a script); until the
-- confirm, the `unconfirmed` entry (due after redeliver_ms) is the net for a publisher that
-- dies first.
-- Returns: {'created', 'pending'} | {'exists', status} (same workflow and input)
--        | {'conflict', workflow} (same thread id, different workflow or input)
local h = redis.call('HMGET', KEYS[1], 'wf', 'input', 'status')
if h[3] then
  if h[1] == ARGV[2] and h[2] == ARGV[5] then return { 'exists', h[3] } end
  return { 'conflict', h[1] or '' }
end
local t = now_ms()
redis.call('HSET', KEYS[1], 'wf', ARGV[2], 'wfv', ARGV[3], 'schema', ARGV[4], 'status', 'pending',
  'steps', 0, 'ver', 1, 'fence', 0, 'attempt', 0, 'owner', '', 'lease', 0,
  'created', t, 'updated', t, 'input', ARGV[5], 'trace', ARGV[8], 'due', t + tonumber(ARGV[6]))
if ARGV[11] ~= '' then redis.call('HSET', KEYS[1], 'deadline', t + tonumber(ARGV[11])) end
if ARGV[12] ~= '' then redis.call('HSET', KEYS[1], 'parent', ARGV[12], 'parent_i', ARGV[13]) end
if ARGV[14] ~= '' then redis.call('HSET', KEYS[1], 'q', ARGV[14], 'hq', ARGV[14]) end
if ARGV[15] ~= '' then redis.call('HSET', KEYS[1], 'fck', ARGV[15], 'fcl', ARGV[16]) end
if ARGV[17] ~= '' then redis.call('HSET', KEYS[1], 'fcr', ARGV[17]) end
if ARGV[18] ~= '0' then redis.call('HSET', KEYS[1], 'prio', ARGV[18]) end
if ARGV[19] ~= '' then redis.call('HSET', KEYS[1], 'needs', ARGV[19]) end
if (ARGV[20] or '') ~= '' then redis.call('HSET', KEYS[1], 'iv', ARGV[20]) end
redis.call('ZADD', KEYS[2], t + tonumber(ARGV[10]), ARGV[1])
redis.call('ZADD', KEYS[5], t + tonumber(ARGV[6]), ARGV[1])
redis.call('ZADD', KEYS[4], t, ARGV[1])
-- Amortised clean-up of the listing index: runs older than the retention have expired.
redis.call('ZREMRANGEBYSCORE', KEYS[4], '-inf', '(' .. (t - tonumber(ARGV[9])))
event(KEYS[3], ARGV[7], 'created', ARGV[2] .. '@' .. ARGV[3], t)
return { 'created', 'pending' }
