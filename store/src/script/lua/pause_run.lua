-- pause_run: pause or resume one run (its own pause, the run field `pz`; §16b).
-- KEYS: 1 run hash, 2 run event list, 3 partition pause hash, 4 partition due zset,
--       5 partition waiting index, 6 partition paused index
-- ARGV: 1 thread id, 2 'pause' | 'resume', 3 pause: the record 'by\31at\31hold\31note'
--       (at is replaced by server time); resume: the event detail (who and why),
--       4 event cap, 5 resume: the workflow version to resume the run on ('' = keep)
-- Returns, pause: {'ok', status} (the run takes no new slice: a slice in flight yields at its
--          next call, at the latest one heartbeat later) | {'already', record}
--        resume: {'ok', status} (put back where it was, due now, if the pause had stopped it)
--          | {'held', field, record} (its own pause is gone, but its workflow's, version's or
--          queue's still holds it) | {'not_own', field, record} (it has no pause of its own;
--          that one holds it: nothing changed) | {'not_paused', status}
--        | {'missing'} | {'terminal', status}
local h = redis.call('HMGET', KEYS[1], 'status', 'pz', 'wf', 'wfv', 'q')
local status = h[1]
if not status then return { 'missing' } end
if terminal[status] then return { 'terminal', status } end
local t = now_ms()
if ARGV[2] == 'pause' then
  if h[2] then return { 'already', h[2] } end
  local by, hold, note = string.match(ARGV[3], '^(.-)\31%d*\31(%d?)\31(.*)$')
  local record = by .. '\31' .. t .. '\31' .. hold .. '\31' .. note
  redis.call('HSET', KEYS[1], 'pz', record)
  event(KEYS[2], ARGV[4], 'paused', pause_text('run', record), t)
  return { 'ok', status }
end
redis.call('HDEL', KEYS[1], 'pz')
if status ~= 'paused' then
  if not h[2] then return { 'not_paused', status } end
  event(KEYS[2], ARGV[4], 'unpaused', ARGV[3], t)
  return { 'ok', status }
end
local pz, field = pause_of(nil, KEYS[3], h[3] or '', h[4] or '0', h[5] or '')
if pz then
  if not h[2] then return { 'not_own', field, pz } end
  if h[2] then event(KEYS[2], ARGV[4], 'unpaused', ARGV[3] .. ' (still held: ' .. pause_text(field, pz) .. ')', t) end
  return { 'held', field, pz }
end
unpark(KEYS[1], KEYS[2], KEYS[4], KEYS[5], KEYS[6], ARGV[1], ARGV[4], ARGV[5], ARGV[3], t)
return { 'ok', 'paused' }
