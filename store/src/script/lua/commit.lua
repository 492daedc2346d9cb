-- commit: append one journal entry and extend the lease (the hot path: once per live step).
-- KEYS: 1 run hash, 2 partition due zset, 3 run event list, 4 run signals hash
--       (5 blocked index, 6 waiting index: unused here)
-- ARGV: 1 thread id, 2 owner, 3 fence, 4 version read, 5 entry index, 6 entry (MessagePack),
--       7 lease_ms, 8 grace_ms, 9 event cap, 10 event type, 11 event detail,
--       12 signal field consumed by this entry ('' = none),
--       13 journal index of the effect the entry settles ('' = none; an effect entry clears its
--          begin record x:<index>, the effect's name n:<index> and any unused-intent mark
--          u:<index>),
--       14 '1' when the entry took more than one attempt: its retry count t:<index> is dropped
-- Returns: {'ok', new_version} | {'missing'} | {'fenced', status, owner, fence}
--        | {'conflict', version} | {'index', steps}
local bad = check_lease(KEYS[1], ARGV[2], ARGV[3], ARGV[4])
if bad then return bad end
local steps = tonumber(redis.call('HGET', KEYS[1], 'steps'))
if steps ~= tonumber(ARGV[5]) then return { 'index', steps } end
local t = now_ms()
local ver = tonumber(ARGV[4]) + 1
local lease = t + tonumber(ARGV[7])
local due = lease + tonumber(ARGV[8])
redis.call('HSET', KEYS[1], 'j:' .. ARGV[5], ARGV[6], 'steps', steps + 1, 'ver', ver,
  'lease', lease, 'due', due, 'updated', t)
redis.call('ZADD', KEYS[2], due, ARGV[1])
if ARGV[12] ~= '' then consume_signal(KEYS[4], ARGV[12]) end
if ARGV[13] ~= '' then redis.call('HDEL', KEYS[1], 'x:' .. ARGV[13], 'n:' .. ARGV[13], 'u:' .. ARGV[13]) end
if ARGV[14] == '1' then redis.call('HDEL', KEYS[1], 't:' .. ARGV[5]) end
event(KEYS[3], ARGV[9], ARGV[10], ARGV[11], t)
return { 'ok', ver }
