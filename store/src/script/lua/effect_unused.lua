-- effect_unused: attempt `fence` of this run took the intent of the effect at journal index
-- `index` and stopped before calling the effect, but could not free the intent (its release
-- failed: a partition, a lost reply). The fact is recorded in the run, u:<index> = fence
-- (only ever raised), so a later attempt that finds that intent in doubt knows its holder
-- never called the effect: finish.lua refuses to block on it and the attempt takes it over.
-- A run that already blocked on that very holder is made runnable again, as an operator's
-- "not applied" resolve would.
-- KEYS: 1 run hash, 2 partition due zset, 3 run event list, 4 partition blocked index
-- ARGV: 1 thread id, 2 journal index, 3 fence, 4 redeliver_ms, 5 event cap, 6 event detail
-- Returns: {'ok'} | {'unblocked', rv, trace} | {'missing'} | {'ended', status}
local h = redis.call('HMGET', KEYS[1], 'status', 'blocked_fx_owner', 'ver', 'steps', 'u:' .. ARGV[2])
local status = h[1]
if not status then return { 'missing' } end
if status == 'completed' or status == 'failed' or status == 'cancelled' then return { 'ended', status } end
-- Journaled meanwhile (the entry's commit drops the mark): nothing left to prove.
if tonumber(ARGV[2]) < tonumber(h[4]) then return { 'ok' } end
if not h[5] or tonumber(h[5]) < tonumber(ARGV[3]) then
  redis.call('HSET', KEYS[1], 'u:' .. ARGV[2], ARGV[3])
end
if status == 'blocked' and h[2] == ARGV[1] .. '\31' .. ARGV[2] .. '\31' .. ARGV[3] then
  local rv, trace = unblock_run(KEYS[1], KEYS[2], KEYS[3], KEYS[4], ARGV[1], h[3], ARGV[4], ARGV[5], ARGV[6])
  return { 'unblocked', rv, trace }
end
return { 'ok' }
