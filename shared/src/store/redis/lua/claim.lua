-- claim: take the run's lease for one slice of work.
-- KEYS: 1 run hash, 2 partition due zset, 3 run event stream, 4 run signals hash
-- ARGV: 1 thread id, 2 owner (worker incarnation), 3 lease_ms, 4 grace_ms,
--       5 task step ('' = unknown), 6 event cap
-- Returns: {'ok', server_now_ms, {run hash fields...}, {signal fields...}, takeover 0|1}
--        | {'missing'} | {'terminal', status} | {'waiting'} | {'not_due', due_ms}
--        | {'leased', owner} | {'stale', steps}
-- Effects: status running, owner, fence+1, lease expiry, due = expiry + grace, version+1.
local h = redis.call('HMGET', KEYS[1], 'status', 'steps', 'owner', 'lease', 'fence', 'due', 'ver', 'attempt')
local status = h[1]
if not status then return { 'missing' } end
if terminal[status] then return { 'terminal', status } end
if status == 'waiting' then return { 'waiting' } end
local t = now_ms()
if status == 'sleeping' and tonumber(h[6] or '0') > t then return { 'not_due', h[6] } end
if status == 'running' and tonumber(h[4]) > t then return { 'leased', h[3] } end
if ARGV[5] ~= '' and tonumber(ARGV[5]) < tonumber(h[2]) then return { 'stale', h[2] } end
local takeover = status == 'running'
local fence = tonumber(h[5]) + 1
local lease = t + tonumber(ARGV[3])
local due = lease + tonumber(ARGV[4])
redis.call('HSET', KEYS[1], 'status', 'running', 'owner', ARGV[2], 'fence', fence, 'lease', lease,
  'ver', tonumber(h[7]) + 1, 'attempt', tonumber(h[8]) + 1, 'updated', t, 'due', due)
redis.call('ZADD', KEYS[2], due, ARGV[1])
if takeover then
  event(KEYS[3], ARGV[6], 'takeover', ARGV[2] .. ' took the expired lease of ' .. h[3], t)
else
  event(KEYS[3], ARGV[6], 'claimed', ARGV[2], t)
end
return { 'ok', t, redis.call('HGETALL', KEYS[1]), redis.call('HGETALL', KEYS[4]), takeover and 1 or 0 }
