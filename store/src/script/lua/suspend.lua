-- suspend: end a slice without finishing the run: sleep on a durable timer, wait for a
-- signal or interrupt, yield to a continuation task, or retry later. Releases the lease.
-- KEYS: 1 run hash, 2 partition due zset, 3 run event list, 4 run signals hash,
--       5 partition blocked index (unused), 6 partition waiting index
-- ARGV: 1 thread id, 2 owner, 3 fence, 4 version read, 5 index of the first entry the
--       slice had not written yet ('' = none), 6 that entry (MessagePack),
--       7 new status (sleeping | waiting | pending),
--       8 due delay ms from server now ('' = no due time), 9 wait kind ('' | interrupt | signal),
--       10 wait name, 11 wait payload (JSON), 12 event cap, 13 event type, 14 event detail,
--       15 redeliver_ms (used when a waited-for value is already buffered),
--       16 effect key the run backs off on ('' = none), 17 back-off count for it,
--       18 journal index whose begin record x:<index> to drop ('' = none),
--       19 task queue the run's next task goes to (`q`; '' = unchanged): a yield that routes
--          the next call to another queue, 20 the suspending worker when it keeps the run's
--          body or journal for its next slice (`held`, whose sticky queue the scanner and the
--          API send that slice's task to; '' = none), 21.. the slice's unwritten entries after
--          the first
-- A run with a deadline (create.lua) never gets a due time past it.
-- Returns: {'ok', new_version, due_ms or '', rv} | {'woke', new_version, due_ms, rv} (the
--          awaited value was already buffered: the run is pending again and needs a task);
--          rv is the new ring version (raised here) a publisher of the next task presents to
--          mark_queued
--        | {'missing'} | {'fenced', ...} | {'conflict', version} | {'index', steps}
local bad = check_lease(KEYS[1], ARGV[2], ARGV[3], ARGV[4])
if bad then return bad end
local t = now_ms()
if ARGV[5] ~= '' then
  local refused = append_entries(KEYS[1], ARGV[5], ARGV[6], 21)
  if refused then return refused end
end
local status, delay, reply = ARGV[7], ARGV[8], 'ok'
if status == 'waiting' then
  -- A value that arrived while the run was still running must not be stranded.
  local prefix = (ARGV[9] == 'interrupt' and 'i:' or 's:') .. ARGV[10]
  for _, f in ipairs(redis.call('HKEYS', KEYS[4])) do
    if f == prefix or string.sub(f, 1, #prefix + 1) == prefix .. ':' then
      status, delay, reply = 'pending', ARGV[15], 'woke'
      break
    end
  end
end
local ver = tonumber(ARGV[4]) + 1
redis.call('HSET', KEYS[1], 'status', status, 'owner', '', 'lease', 0, 'ver', ver, 'updated', t)
if ARGV[20] ~= '' then
  redis.call('HSET', KEYS[1], 'held', ARGV[20])
else
  redis.call('HDEL', KEYS[1], 'held')
end
if ARGV[9] ~= '' then
  redis.call('HSET', KEYS[1], 'wait_kind', ARGV[9], 'wait_name', ARGV[10], 'wait_payload', ARGV[11])
else
  redis.call('HDEL', KEYS[1], 'wait_kind', 'wait_name', 'wait_payload')
end
local due = ''
if delay ~= '' then due = t + tonumber(delay) end
-- A run deadline bounds every due time (a wait without one gets the deadline as its due), so
-- the scanner hands the run to a worker, which fails it, when the deadline passes. That holds
-- for a pending run given a due time too (parked in a flow-control line, retried later); a
-- pending run with none has its task now.
local deadline = tonumber(redis.call('HGET', KEYS[1], 'deadline') or '')
if deadline and ((status ~= 'pending' and due == '') or (due ~= '' and due > deadline)) then due = deadline end
if due ~= '' then
  redis.call('ZADD', KEYS[2], due, ARGV[1])
  redis.call('HSET', KEYS[1], 'due', due)
else
  redis.call('ZREM', KEYS[2], ARGV[1])
  redis.call('HDEL', KEYS[1], 'due')
end
if ARGV[16] ~= '' then
  redis.call('HSET', KEYS[1], 'wait_fx', ARGV[16], 'wait_fx_n', ARGV[17])
end
if ARGV[19] ~= '' then redis.call('HSET', KEYS[1], 'q', ARGV[19]) end
if ARGV[18] ~= '' then
  -- Backing off, the run never took the key's intent: its begin record (x:<index>) does not
  -- mean it holds one, so cancel must not settle (or list) another run's intent as its own.
  -- (The index is the call's, which inside a parallel group runs ahead of the journal.)
  redis.call('HDEL', KEYS[1], 'x:' .. ARGV[18], 'n:' .. ARGV[18])
end
if status == 'waiting' then redis.call('ZADD', KEYS[6], t, ARGV[1]) end
event(KEYS[3], ARGV[12], ARGV[13], ARGV[14], t)
-- A new due regime (a wake time, a retry, no due at all): a task published under the lease
-- (its rv) is stale now, so a late mark_queued for it must not move this run's due time.
local rv = redis.call('HINCRBY', KEYS[1], 'rv', 1)
return { reply, ver, due, tostring(rv) }
