-- note: set one bookkeeping field of a run the caller holds (e.g. `cur`, the call in flight
-- after a crash, named in a poison run's reason). Does not bump the version.
-- KEYS: 1 run hash
-- ARGV: 1 owner, 2 fence, 3 field, 4 value
-- Returns: {'ok'} | {'missing'} | {'fenced', status, owner, fence}
local bad = check_lease(KEYS[1], ARGV[1], ARGV[2], '')
if bad then return bad end
redis.call('HSET', KEYS[1], ARGV[3], ARGV[4])
return { 'ok' }
