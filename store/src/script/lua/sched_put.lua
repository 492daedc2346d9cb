-- sched_put: create a schedule (idempotent: the same spec again is `exists`).
-- KEYS: 1 schedule hash, 2 next-firing index, 3 index of all schedules
-- ARGV: 1 schedule id, 2 spec (JSON, without the input), 3 first firing (ms), 4 input (sealed
--       like a run's)
-- Returns: {'created', server_now} | {'exists'} (same spec) | {'conflict'} (another spec)
local cur = redis.call('HGET', KEYS[1], 'spec')
if cur then
  if cur == ARGV[2] then return { 'exists' } end
  return { 'conflict' }
end
local t = now_ms()
redis.call('HSET', KEYS[1], 'spec', ARGV[2], 'input', ARGV[4], 'created', t, 'fired', 0, 'skipped', 0,
  'next', ARGV[3])
redis.call('ZADD', KEYS[3], t, ARGV[1])
redis.call('ZADD', KEYS[2], ARGV[3], ARGV[1])
return { 'created', tostring(t) }
