-- event: record an event (e.g. a step retry) for a run the caller still holds.
-- KEYS: 1 run hash, 2 run event stream
-- ARGV: 1 owner, 2 fence, 3 event cap, 4 event type, 5 event detail,
--       6 journal index of a retried call ('' = none), 7 its failed attempts so far: kept as
--          t:<index> so the retry budget outlives the slice (commit drops it with the entry),
--       8 the back-off before the next attempt (ms; '' = none): kept as rb =
--          `until\x1findex\x1fattempt` (the waiting cause of a running run that backs off;
--          read only while until is ahead, so it needs no clearing)
-- Returns: {'ok'} | {'missing'} | {'fenced', status, owner, fence}
local bad = check_lease(KEYS[1], ARGV[1], ARGV[2], '')
if bad then return bad end
local t = now_ms()
if ARGV[6] ~= '' then redis.call('HSET', KEYS[1], 't:' .. ARGV[6], ARGV[7]) end
if (ARGV[8] or '') ~= '' then
  redis.call('HSET', KEYS[1], 'rb', (t + tonumber(ARGV[8])) .. '\31' .. ARGV[6] .. '\31' .. ARGV[7])
end
event(KEYS[2], ARGV[3], ARGV[4], ARGV[5], t)
return { 'ok' }
