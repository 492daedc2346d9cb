-- flow_extend: a heartbeat moves the expiry of the slot its run holds (nothing if it holds
-- none: a slot that expired is not taken back this way).
-- KEYS: 1 the key's slots zset
-- ARGV: 1 thread id, 2 slot expiry (ms from now)
-- Returns: {'ok'} | {'none'} (it holds no slot)
if not redis.call('ZSCORE', KEYS[1], ARGV[1]) then return { 'none' } end
redis.call('ZADD', KEYS[1], now_ms() + tonumber(ARGV[2]), ARGV[1])
return { 'ok' }
