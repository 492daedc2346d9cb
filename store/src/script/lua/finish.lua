-- finish: end the run as completed, failed or blocked (or end a slice as blocked).
-- KEYS: 1 run hash, 2 partition due zset, 3 run event list, 4 run signals hash,
--       5 partition blocked index, 6 partition waiting index (unused)
-- ARGV: 1 thread id, 2 owner, 3 fence, 4 version read, 5 index of the first entry the
--       slice had not written yet ('' = none), 6 that entry (MessagePack),
--       7 status (completed | failed | blocked), 8 output (JSON or ''),
--       9 error ('' = none), 10 blocked reason, 11 blocked effect key, 12 retention_ms,
--       13 event cap, 14 event type, 15 event detail,
--       16 the in-doubt record the block waits on, 'thread\31index\31fence' ('' = none),
--       17 blocked on a delivered value that did not decode: its signal field, consumed
--          ('' = none), 18 wait kind, 19 wait name, 20 wait payload: the wait is kept, so the
--          run takes a new answer (see signal.lua), 21 the kind of block (`bk`: in_doubt |
--          non_determinism | panic | undecodable | other; '' = not blocked),
--       22 the version of the output's type as the run's code declares it, `<type>@<version>`
--          (`ov`; `@1` for a type it does not declare; '' from a build before it said 1),
--       23.. the slice's unwritten entries after the first
-- Returns: {'ok', new_version} | {'missing'} | {'fenced', ...} | {'conflict', v} | {'index', steps}
--        | {'unused', index, fence} (the in-doubt record of ARGV 16 is this run's own unused
--          intent: not blocked)
-- Completed and failed runs expire after the retention; blocked runs wait for an operator.
local bad = check_lease(KEYS[1], ARGV[2], ARGV[3], ARGV[4])
if bad then return bad end
-- A block on an in-doubt intent of this run's own earlier attempt: if that attempt recorded
-- that it never called the effect (u:<index> = its fence, see effect_unused.lua), the intent
-- is not in doubt and nothing is written: the caller takes it over.
if ARGV[7] == 'blocked' and ARGV[16] ~= '' then
  local th, ix, fe = string.match(ARGV[16], '^(.*)\31(%d+)\31(%d+)$')
  if th == ARGV[1] and redis.call('HGET', KEYS[1], 'u:' .. ix) == fe then return { 'unused', ix, fe } end
end
local t = now_ms()
if ARGV[5] ~= '' then
  local refused = append_entries(KEYS[1], ARGV[5], ARGV[6], 23)
  if refused then return refused end
end
local ver = tonumber(ARGV[4]) + 1
redis.call('HSET', KEYS[1], 'status', ARGV[7], 'owner', '', 'lease', 0, 'ver', ver, 'updated', t)
-- (Only a run that ended has a finish time: a blocked one is resumed.)
if ARGV[7] ~= 'blocked' then redis.call('HSET', KEYS[1], 'finished', t) end
redis.call('HDEL', KEYS[1], 'due', 'wait_kind', 'wait_name', 'wait_payload')
if ARGV[17] ~= '' then
  consume_signal(KEYS[4], ARGV[17])
  redis.call('HSET', KEYS[1], 'wait_kind', ARGV[18], 'wait_name', ARGV[19], 'wait_payload', ARGV[20])
end
if ARGV[8] ~= '' then redis.call('HSET', KEYS[1], 'output', ARGV[8]) end
-- (A completion without a version clears one an earlier completion left: a restart by a
-- scheduler from before `ov` keeps it.)
if ARGV[7] == 'completed' then
  if ARGV[22] ~= '' then redis.call('HSET', KEYS[1], 'ov', ARGV[22]) else redis.call('HDEL', KEYS[1], 'ov') end
end
if ARGV[9] ~= '' then redis.call('HSET', KEYS[1], 'error', ARGV[9]) end
if ARGV[10] ~= '' then redis.call('HSET', KEYS[1], 'reason', ARGV[10]) end
if ARGV[21] ~= '' then redis.call('HSET', KEYS[1], 'bk', ARGV[21]) end
if ARGV[11] ~= '' then redis.call('HSET', KEYS[1], 'blocked_fx', ARGV[11]) end
if ARGV[16] ~= '' then redis.call('HSET', KEYS[1], 'blocked_fx_owner', ARGV[16]) end
if ARGV[7] == 'blocked' then redis.call('ZADD', KEYS[5], t, ARGV[1]) end
redis.call('ZREM', KEYS[2], ARGV[1])
event(KEYS[3], ARGV[13], ARGV[14], ARGV[15], t)
if ARGV[7] ~= 'blocked' and tonumber(ARGV[12]) > 0 then
  for i = 1, 4 do
    if i ~= 2 then redis.call('PEXPIRE', KEYS[i], ARGV[12]) end
  end
end
return { 'ok', ver }
