-- reseal: replace a sealed value kept in a hash field (a schedule's input, the namespace's
-- naming secret) by the same value sealed with the sealing key, only if it is still the
-- value the caller read (a concurrent change wins).
-- KEYS: 1 the hash
-- ARGV: 1 the field, 2 the value as read, 3 the value sealed anew
-- Returns: {'ok'} | {'changed'}
if redis.call('HGET', KEYS[1], ARGV[1]) ~= ARGV[2] then return { 'changed' } end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[3])
return { 'ok' }
