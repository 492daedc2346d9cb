-- sched_reseal: replace a schedule's stored input by the same value sealed with the sealing
-- key, only if it is still the value the caller read (a concurrent delete or re-create wins).
-- KEYS: 1 schedule hash
-- ARGV: 1 the input as read, 2 the input sealed anew
-- Returns: {'ok'} | {'changed'}
if redis.call('HGET', KEYS[1], 'input') ~= ARGV[1] then return { 'changed' } end
redis.call('HSET', KEYS[1], 'input', ARGV[2])
return { 'ok' }
