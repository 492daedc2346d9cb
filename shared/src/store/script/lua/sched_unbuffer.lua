-- sched_unbuffer: the run of a schedule's buffered firing was created once the previous run
-- ended: it becomes the last run and the buffer is empty (only if it still holds that firing).
-- KEYS: 1 schedule hash, 2 buffered index
-- ARGV: 1 schedule id, 2 buffered firing (ms), 3 its run's thread id
-- Returns: {'ok'} | {'moved'}
if redis.call('HGET', KEYS[1], 'buffered') ~= ARGV[2] then return { 'moved' } end
redis.call('HDEL', KEYS[1], 'buffered')
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('HSET', KEYS[1], 'last', ARGV[3], 'last_at', ARGV[2])
redis.call('HINCRBY', KEYS[1], 'fired', 1)
return { 'ok' }
