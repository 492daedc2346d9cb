-- flow_extend: a heartbeat moves the expiry of the slot its slice holds (nothing if it holds
-- none, or if a later slice of the run took the slot over: a slot that expired or passed to
-- another fence is not taken back this way).
-- KEYS: 1 the key's slots zset, 2 the slots' holders (thread -> fence)
-- ARGV: 1 thread id, 2 slot expiry (ms from now), 3 the slice's fencing token
-- Returns: {'ok'} | {'none'} (it holds no slot)
if not redis.call('ZSCORE', KEYS[1], ARGV[1]) then return { 'none' } end
if redis.call('HGET', KEYS[2], ARGV[1]) ~= ARGV[3] then return { 'none' } end
local t = now_ms()
redis.call('ZADD', KEYS[1], t + tonumber(ARGV[2]), ARGV[1])
expire_slots(KEYS[1], KEYS[2], t)
return { 'ok' }
