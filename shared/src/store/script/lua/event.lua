-- event: record an event (e.g. a step retry) for a run the caller still holds.
-- KEYS: 1 run hash, 2 run event stream
-- ARGV: 1 owner, 2 fence, 3 event cap, 4 event type, 5 event detail
-- Returns: {'ok'} | {'missing'} | {'fenced', status, owner, fence}
local bad = check_lease(KEYS[1], ARGV[1], ARGV[2], '')
if bad then return bad end
event(KEYS[2], ARGV[3], ARGV[4], ARGV[5], now_ms())
return { 'ok' }
