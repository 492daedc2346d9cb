-- forget_feature: an operator lets a run go of a value run feature no build will ever name
-- (`value:<type>@<version>`: a versioned type renamed or dropped without `FORMERLY`), so the
-- claim's feature gate stops giving it back. The run is not changed otherwise: the next worker
-- upgrades the value as its own type from the recorded version, and blocks the run on one it
-- cannot decode (a version carries no type name, so this is an admin's call: README §10).
-- Engine features cannot be forgotten: a run that uses one is executed only by a build that
-- has it.
-- KEYS: 1 run hash, 2 partition due zset, 3 run event list, 4 partition unserved index
-- ARGV: 1 thread id, 2 the feature, 3 event cap, 4 event detail
-- Returns: {'ok', rv, trace, due} | {'missing'} | {'ended', status} | {'running'} | {'engine'} |
--   {'not_needed', needs}
local h = redis.call('HMGET', KEYS[1], 'status', 'needs', 'due')
if not h[1] then return { 'missing' } end
local status = h[1]
if status == 'completed' or status == 'failed' or status == 'cancelled' then return { 'ended', status } end
if status == 'running' then return { 'running' } end
if string.sub(ARGV[2], 1, 6) ~= 'value:' then return { 'engine' } end
local kept, found = {}, false
for f in string.gmatch(h[2] or '', '[^\31]+') do
  if f == ARGV[2] then found = true else kept[#kept + 1] = f end
end
if not found then return { 'not_needed', h[2] or '' } end
local t = now_ms()
if #kept == 0 then
  redis.call('HDEL', KEYS[1], 'needs')
else
  redis.call('HSET', KEYS[1], 'needs', table.concat(kept, '\31'))
end
redis.call('HSET', KEYS[1], 'updated', t)
redis.call('HDEL', KEYS[1], 'waiting_for', 'unserved_n', 'unserved_at')
redis.call('ZREM', KEYS[4], ARGV[1])
-- A run given back is pending with a back-off: due now. (A blocked, paused or waiting run
-- keeps its due time: it moves when its own cause does.)
local due = ''
if status == 'pending' and h[3] then
  due = tostring(t)
  redis.call('HSET', KEYS[1], 'due', t)
  redis.call('ZADD', KEYS[2], t, ARGV[1])
end
event(KEYS[3], ARGV[3], 'feature_forgotten', ARGV[4], t)
local rv = redis.call('HINCRBY', KEYS[1], 'rv', 1)
return { 'ok', tostring(rv), redis.call('HGET', KEYS[1], 'trace') or '', due }
