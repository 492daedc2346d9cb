-- child_link: a parent records the child run its call at one journal index starts, before
-- the child is created (so a cancel that comes between finds it), with an event. Idempotent:
-- a replayed call after a crash finds the link and records nothing more.
-- The links are one header field, `children`: '\30<index>\31<thread>\31<policy>' per child.
-- KEYS: 1 run hash, 2 run event list
-- ARGV: 1 owner, 2 fence, 3 journal index, 4 child thread id, 5 on-parent-cancel policy
--       (cancel | abandon), 6 event cap, 7 event detail
-- Returns: {'ok'} | {'missing'} | {'fenced', status, owner, fence}
local bad = check_lease(KEYS[1], ARGV[1], ARGV[2], '')
if bad then return bad end
local links = redis.call('HGET', KEYS[1], 'children') or ''
if not string.find(links, '\30' .. ARGV[3] .. '\31', 1, true) then
  redis.call('HSET', KEYS[1], 'children', links .. '\30' .. ARGV[3] .. '\31' .. ARGV[4] .. '\31' .. ARGV[5])
  event(KEYS[2], ARGV[6], 'child_started', ARGV[7], now_ms())
end
return { 'ok' }
