-- sched_advance: move a schedule on from its due firing, recording the runs this replica
-- decided to start as `pending` (created after this script, idempotently: a run's thread id
-- is its firing's) — only if no other scheduler replica moved it first and nothing the
-- decision read has changed: the next firing, the last run (the one the overlap policy was
-- judged against) and no runs still pending. So exactly one replica's decision counts for
-- each firing, and the run it decides is the schedule's `last` before it exists: no replica
-- judges overlap against an older run while a newer one is being created.
-- KEYS: 1 schedule hash, 2 next-firing index, 3 buffered index, 4 pending index
-- ARGV: 1 schedule id, 2 next firing expected (ms), 3 new next firing (ms, '' = none),
--       4 last run's thread id ('' = unchanged), 5 its firing time, 6 runs started,
--       7 firings skipped, 8 buffered firing ('' = unchanged, '-' = none, else its time),
--       9 the last run the decision read ('' = none), 10 runs to create
--       (`thread@firing,…`, '' = none)
-- Returns: {'ok'} | {'moved'} (another replica advanced it, it was deleted, or what the
--          decision read changed)
-- A schedule paused while its firing was under way still counts that firing's run; it stays
-- out of the next-firing index until resumed.
if redis.call('HGET', KEYS[1], 'next') ~= ARGV[2] then return { 'moved' } end
if (redis.call('HGET', KEYS[1], 'last') or '') ~= ARGV[9] then return { 'moved' } end
if redis.call('HEXISTS', KEYS[1], 'pending') == 1 then return { 'moved' } end
local paused = redis.call('HGET', KEYS[1], 'paused')
if ARGV[3] == '' then
  redis.call('HDEL', KEYS[1], 'next')
  redis.call('ZREM', KEYS[2], ARGV[1])
else
  redis.call('HSET', KEYS[1], 'next', ARGV[3])
  if not paused then redis.call('ZADD', KEYS[2], ARGV[3], ARGV[1]) end
end
if ARGV[4] ~= '' then redis.call('HSET', KEYS[1], 'last', ARGV[4], 'last_at', ARGV[5]) end
redis.call('HINCRBY', KEYS[1], 'fired', ARGV[6])
redis.call('HINCRBY', KEYS[1], 'skipped', ARGV[7])
if ARGV[8] == '-' then
  redis.call('HDEL', KEYS[1], 'buffered')
  redis.call('ZREM', KEYS[3], ARGV[1])
elseif ARGV[8] ~= '' then
  redis.call('HSET', KEYS[1], 'buffered', ARGV[8])
  redis.call('ZADD', KEYS[3], ARGV[8], ARGV[1])
end
if ARGV[10] ~= '' then
  redis.call('HSET', KEYS[1], 'pending', ARGV[10])
  redis.call('ZADD', KEYS[4], now_ms(), ARGV[1])
end
return { 'ok' }
