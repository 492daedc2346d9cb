-- commit: append journal entries and extend the lease (the hot path: one script per batch of
-- a slice's pipelined steps, see ARCHITECTURE §4a).
-- KEYS: 1 run hash, 2 partition due zset, 3 run event list, 4 run signals hash
--       (5 blocked index, 6 waiting index: unused here)
-- ARGV: 1 thread id, 2 owner, 3 fence, 4 version read, 5 index of the first entry,
--       6 first entry (MessagePack),
--       7 lease_ms, 8 grace_ms, 9 event cap, 10 event type, 11 event detail,
--       12 signal field consumed by this entry ('' = none),
--       13 journal index of the effect the entry settles ('' = none; an effect entry clears its
--          begin record x:<index>, the effect's name n:<index> and any unused-intent mark
--          u:<index>),
--       14 '1' when the last entry took more than one attempt: its retry count t:<index> is
--          dropped, 15.. the entries after the first, in journal order (the event, the
--          consumed signal and the settled effect are the last entry's)
-- Returns: {'ok', new_version} | {'missing'} | {'fenced', status, owner, fence}
--        | {'conflict', version} | {'index', steps}
local bad = check_lease(KEYS[1], ARGV[2], ARGV[3], ARGV[4])
if bad then return bad end
local refused, steps = append_entries(KEYS[1], ARGV[5], ARGV[6], 15)
if refused then return refused end
local t = now_ms()
local ver = tonumber(ARGV[4]) + 1
local lease = t + tonumber(ARGV[7])
local due = lease + tonumber(ARGV[8])
redis.call('HSET', KEYS[1], 'ver', ver, 'lease', lease, 'due', due, 'updated', t)
redis.call('ZADD', KEYS[2], due, ARGV[1])
if ARGV[12] ~= '' then consume_signal(KEYS[4], ARGV[12]) end
if ARGV[13] ~= '' then redis.call('HDEL', KEYS[1], 'x:' .. ARGV[13], 'n:' .. ARGV[13], 'u:' .. ARGV[13]) end
if ARGV[14] == '1' then redis.call('HDEL', KEYS[1], 't:' .. (steps - 1)) end
event(KEYS[3], ARGV[9], ARGV[10], ARGV[11], t)
return { 'ok', ver }
