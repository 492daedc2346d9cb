-- fork: a new run whose journal is the first N entries of another (time travel: LangGraph's
-- fork from a checkpoint, DBOS's fork_workflow). The caller read the source run, opened its
-- values and sealed them again for the new thread (a sealed value is bound to its run), so
-- this script only touches the new run's keys (another hash slot than the source's). The new
-- run replays entries 0..N-1 (their steps and effects are not run again) and runs on from N.
-- KEYS: 1 run hash, 2 partition due zset, 3 run event list, 4 partition run index,
--       5 partition index of runs whose start task is not confirmed yet
-- ARGV: 1 thread id, 2 workflow name, 3 workflow version, 4 checkpoint schema version,
--       5 input, 6 redeliver_ms, 7 event cap, 8 trace context, 9 retention_ms,
--       10 queued_redeliver_ms, 11 forked from ('<thread>@<N>'), 12 N,
--       13 the source's home task queue ('' = the default: the fork runs where it ran),
--       14 the source's flow-control key ('' = none; sealed for the new run), 15 its limit,
--       16 its start rate ('' = none), 17 the source's priority (0-9),
--       18 the run features it needs ('' = none; see create.lua), 19 the version of the
--       input's type ('' = 1), 20.. entries 0..N-1
-- (The fork shares the source's flow limit and priority; it does not inherit its deadline,
-- an absolute time that may have passed: a fork runs without one.)
-- Returns: {'created'} | {'exists', status} (a fork of the same run and entry under this id)
--        | {'conflict', forked_from or ''} (the id is taken by another run)
local h = redis.call('HMGET', KEYS[1], 'status', 'forked_from')
if h[1] then
  if h[2] == ARGV[11] then return { 'exists', h[1] } end
  return { 'conflict', h[2] or '' }
end
local t = now_ms()
local n = tonumber(ARGV[12])
redis.call('HSET', KEYS[1], 'wf', ARGV[2], 'wfv', ARGV[3], 'schema', ARGV[4], 'status', 'pending',
  'steps', n, 'ver', 1, 'fence', 0, 'attempt', 0, 'owner', '', 'lease', 0,
  'created', t, 'updated', t, 'input', ARGV[5], 'trace', ARGV[8], 'due', t + tonumber(ARGV[6]),
  'forked_from', ARGV[11])
if ARGV[13] ~= '' then redis.call('HSET', KEYS[1], 'q', ARGV[13], 'hq', ARGV[13]) end
if ARGV[14] ~= '' then redis.call('HSET', KEYS[1], 'fck', ARGV[14], 'fcl', ARGV[15]) end
if ARGV[16] ~= '' then redis.call('HSET', KEYS[1], 'fcr', ARGV[16]) end
if ARGV[17] ~= '0' then redis.call('HSET', KEYS[1], 'prio', ARGV[17]) end
if ARGV[18] ~= '' then redis.call('HSET', KEYS[1], 'needs', ARGV[18]) end
if ARGV[19] ~= '' then redis.call('HSET', KEYS[1], 'iv', ARGV[19]) end
for i = 0, n - 1 do redis.call('HSET', KEYS[1], 'j:' .. i, ARGV[20 + i]) end
redis.call('ZADD', KEYS[2], t + tonumber(ARGV[10]), ARGV[1])
redis.call('ZADD', KEYS[5], t + tonumber(ARGV[6]), ARGV[1])
redis.call('ZADD', KEYS[4], t, ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[4], '-inf', '(' .. (t - tonumber(ARGV[9])))
event(KEYS[3], ARGV[7], 'created', ARGV[2] .. '@' .. ARGV[3], t)
event(KEYS[3], ARGV[7], 'forked', 'from ' .. ARGV[11], t)
return { 'created' }
