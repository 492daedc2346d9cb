-- sched_unbuffer: a schedule's buffered firing may start (the previous run ended): it becomes
-- the last run and a pending run to create, and the buffer is empty — only if the schedule
-- still holds that firing, its last run is still the one the caller found ended, and no run
-- is pending (the same rule as sched_advance).
-- KEYS: 1 schedule hash, 2 buffered index, 3 pending index
-- ARGV: 1 schedule id, 2 buffered firing (ms), 3 its run's thread id, 4 the last run the
--       caller read ('' = none)
-- Returns: {'ok'} | {'moved'}
if redis.call('HGET', KEYS[1], 'buffered') ~= ARGV[2] then return { 'moved' } end
if (redis.call('HGET', KEYS[1], 'last') or '') ~= ARGV[4] then return { 'moved' } end
if redis.call('HEXISTS', KEYS[1], 'pending') == 1 then return { 'moved' } end
redis.call('HDEL', KEYS[1], 'buffered')
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('HSET', KEYS[1], 'last', ARGV[3], 'last_at', ARGV[2], 'pending', ARGV[3] .. '@' .. ARGV[2])
redis.call('HINCRBY', KEYS[1], 'fired', 1)
redis.call('ZADD', KEYS[3], now_ms(), ARGV[1])
return { 'ok' }
