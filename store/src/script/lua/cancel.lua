-- cancel: stop a run that has not ended. The fence moves on, so a worker still executing it
-- is refused at its next write and stops.
-- KEYS: 1 run hash, 2 partition due zset, 3 run event list, 4 run signals hash,
--       5 partition blocked index, 6 partition waiting index, 7 partition unserved index,
--       8 partition unconfirmed-start index
-- ARGV: 1 thread id, 2 retention_ms, 3 event cap, 4 reason (the `reason` field, sealed for it
--       with payload keys), 5 the `cancelled` event's detail (the reason, sealed for events)
-- Returns: {'ok', index, key, index, key, …} (the effect intents the run held, by journal
--          index: the caller settles each as "in doubt, owner cancelled")
--        | {'missing'} | {'terminal', status}
local h = redis.call('HMGET', KEYS[1], 'status', 'fence', 'ver')
if not h[1] then return { 'missing' } end
if terminal[h[1]] and h[1] ~= 'blocked' then return { 'terminal', h[1] } end
local t = now_ms()
redis.call('HSET', KEYS[1], 'status', 'cancelled', 'fence', tonumber(h[2]) + 1, 'owner', '',
  'lease', 0, 'ver', tonumber(h[3]) + 1, 'updated', t, 'finished', t, 'reason', ARGV[4])
-- (The reason is the cancel's now: a blocked run's kind of block goes with its old one.)
-- (A cancelled run is not paused: what stopped it goes; the paused index drops it lazily.)
redis.call('HDEL', KEYS[1], 'due', 'bk', 'pz', 'ps', 'pzw', 'pzr')
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('ZREM', KEYS[5], ARGV[1])
redis.call('ZREM', KEYS[6], ARGV[1])
redis.call('ZREM', KEYS[7], ARGV[1])
redis.call('ZREM', KEYS[8], ARGV[1])
event(KEYS[3], ARGV[3], 'cancelled', ARGV[5], t)
local held = { 'ok' }
for _, f in ipairs(redis.call('HKEYS', KEYS[1])) do
  if string.sub(f, 1, 2) == 'x:' then
    table.insert(held, string.sub(f, 3))
    table.insert(held, redis.call('HGET', KEYS[1], f))
  end
end
if tonumber(ARGV[2]) > 0 then
  for i = 1, 4 do
    if i ~= 2 then redis.call('PEXPIRE', KEYS[i], ARGV[2]) end
  end
end
return held
