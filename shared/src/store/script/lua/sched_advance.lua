-- sched_advance: after the runs of a schedule's due firings were created (idempotently, thread
-- id from the firing time), move its next firing on — only if no other scheduler replica did
-- so first (compare-and-set on the next time), so each firing is accounted once.
-- KEYS: 1 schedule hash, 2 next-firing index, 3 buffered index
-- ARGV: 1 schedule id, 2 next firing expected (ms), 3 new next firing (ms, '' = none),
--       4 last run's thread id ('' = unchanged), 5 its firing time, 6 runs started,
--       7 firings skipped, 8 buffered firing ('' = unchanged, '-' = none, else its time)
-- Returns: {'ok'} | {'moved'} (another replica advanced it, or it was deleted)
-- A schedule paused while its firing was under way still counts that firing's run; it stays
-- out of the next-firing index until resumed.
if redis.call('HGET', KEYS[1], 'next') ~= ARGV[2] then return { 'moved' } end
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
return { 'ok' }
