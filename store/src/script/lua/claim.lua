-- claim: take the run's lease for one slice of work.
-- KEYS: 1 run hash, 2 partition due zset, 3 run event list, 4 run signals hash,
--       5 partition blocked index, 6 partition index of runs given back as unserved,
--       7 partition unconfirmed-start index, 8 partition waiting index,
--       9 partition pause hash (workflow, version and queue pauses), 10 partition paused index
-- ARGV: 1 thread id, 2 owner (worker incarnation), 3 lease_ms, 4 grace_ms,
--       5 task step ('' = unknown), 6 event cap,
--       7 served spec: '\31name\30min\30max\31…' ('' = serve anything), 8 checkpoint schema,
--       9 max crashes, 10 unserved back-off base ms, 11 unserved back-off cap ms,
--       12 task queues served: '\31q1\31q2\31' ('' = any),
--       13 the run features this worker knows: '\31f1\31f2\31' (with a served spec: a run whose
--          `needs` names another is given back as unserved),
--       14 the journal the worker holds of this run ('' = none): 'n\30created\30restarts', its
--          first n entries as of a run created at `created` and restarted `restarts` times
--          (a restart is the only write that drops entries; every other write appends)
-- Returns: {'ok', server_now_ms, {run hash fields...}, {signal fields...}, takeover 0|1, crashes,
--          from}: `from` '' when the fields are the whole hash; else the journal index of the
--          first `j:` field returned: the fields are the run's header and its entries from
--          n-1 on (the worker checks entry n-1 against its own, then appends the rest), and the
--          hash has no other field (no recorded tries, begin records or unused marks)
--        | {'missing'} | {'terminal', status} | {'waiting'} (no answer yet, and no wait deadline
--          passed: a wait with a timeout is claimable once its due time passes)
--        | {'not_due', due_ms}
--        | {'leased', owner} | {'stale', steps}
--        | {'unserved', reason, retry_in_ms, workflow, version, rv, tries} (this worker cannot run it:
--          given back untouched, due again after a growing back-off, the reason shown on the run)
--        | {'poison', reason} (taken over max-crashes times at one journal position: blocked,
--          block kind `bk` poison)
--        | {'misrouted', queue} (the run is routed to a task queue this worker does not serve:
--          untouched; the worker forwards the task there)
--        | {'paused', field, record} (a pause holds the run: its own (`pz`, field 'run') or its
--          workflow's, version's or queue's in KEYS[9]; the run is stopped: status `paused`,
--          the status it had in `ps`, out of the due zset, in the paused index, event
--          `paused`; field '' when it was stopped already)
-- Effects: status running, owner, fence+1, lease expiry, due = expiry + grace, version+1,
-- attempt+1, rv+1 (ring version: a confirmed task outstanding before this claim is spent),
-- rings 0, crash accounting.

-- The fields a worker holding the run's first n entries needs (ARGV 14), or nil when it must
-- read the whole hash: it holds nothing, the run was restarted or created again since, or the
-- hash holds bookkeeping fields beside the header and the journal.
local function incremental_fields(run, have, steps)
  if have == '' then return nil end
  -- Every field of a run hash other than the journal (`j:<i>`) and the per-call bookkeeping
  -- (`t:`, `x:`, `n:`, `u:` by journal index). A field missing here only costs speed: the
  -- hash's length then disagrees with the count below, and the whole hash is read.
  local HEADER = { 'status', 'steps', 'owner', 'lease', 'fence', 'due', 'ver', 'attempt', 'wf', 'wfv',
    'schema', 'rv', 'cstep', 'crashes', 'crashed_by', 'cur', 'unserved_n', 'unserved_at', 'rings',
    'wait_fx', 'wait_fx_n', 'waiting_for', 'q', 'needs', 'created', 'updated', 'input', 'trace',
    'deadline', 'parent', 'parent_i', 'hq', 'fck', 'fcl', 'fcr', 'prio', 'bk', 'blocked_fx',
    'blocked_fx_owner', 'reason', 'error', 'output', 'finished', 'forked_from', 'restarted_from',
    'restarts', 'wait_kind', 'wait_name', 'wait_payload', 'pz', 'ps', 'pzw', 'pzr', 'rb', 'iv', 'held', 'ov' }
  local n, created, restarts = string.match(have, '^(%d+)\30(%d+)\30(%d+)$')
  n = tonumber(n)
  if not n or n < 1 or n > steps then return nil end
  local vals = redis.call('HMGET', run, unpack(HEADER))
  if tonumber(vals[25] or '0') ~= tonumber(created) or tonumber(vals[46] or '0') ~= tonumber(restarts) then
    return nil
  end
  local out, present = {}, 0
  for i, f in ipairs(HEADER) do
    if vals[i] then
      out[#out + 1] = f
      out[#out + 1] = vals[i]
      present = present + 1
    end
  end
  if redis.call('HLEN', run) ~= present + steps then return nil end
  for i = n - 1, steps - 1 do
    out[#out + 1] = 'j:' .. i
    out[#out + 1] = redis.call('HGET', run, 'j:' .. i)
  end
  return out, tostring(n - 1)
end

local h = redis.call('HMGET', KEYS[1], 'status', 'steps', 'owner', 'lease', 'fence', 'due', 'ver',
  'attempt', 'wf', 'wfv', 'schema', 'rv', 'cstep', 'crashes', 'crashed_by', 'cur', 'unserved_n',
  'unserved_at', 'rings', 'wait_fx', 'waiting_for', 'q', 'needs', 'pz')
local status = h[1]
if not status then return { 'missing' } end
if terminal[status] then return { 'terminal', status } end
if status == 'paused' then return { 'paused', '', '' } end
local t = now_ms()
if status == 'waiting' and not (h[6] and tonumber(h[6]) <= t) then return { 'waiting' } end
if status == 'sleeping' and tonumber(h[6] or '0') > t then return { 'not_due', h[6] } end
if status == 'running' and tonumber(h[4]) > t then
  -- The task is dropped: a mark of it still in flight (mark_queued) must not push the run's
  -- safety net out, or a holder that dies before its next lease extension strands the run.
  redis.call('HINCRBY', KEYS[1], 'rv', 1)
  return { 'leased', h[3] }
end
local steps = tonumber(h[2])
if ARGV[5] ~= '' and tonumber(ARGV[5]) < steps then return { 'stale', h[2] } end
local rv = tonumber(h[12] or '0') + 1
if ARGV[12] ~= '' and h[22] and h[22] ~= '' and not string.find(ARGV[12], '\31' .. h[22] .. '\31', 1, true) then
  return { 'misrouted', h[22] }
end

-- Paused: the run takes no slice. It leaves the due zset (and every net that would ring it)
-- until a resume puts it back (unpark, in the prelude).
local pz, pfield = pause_of(h[24], KEYS[9], h[9] or '', h[10] or '0', h[22] or '')
if pz then
  redis.call('HSET', KEYS[1], 'status', 'paused', 'ps', status, 'pzw', pfield, 'pzr', pz, 'updated', t,
    'rv', rv)
  redis.call('ZREM', KEYS[2], ARGV[1])
  if status == 'waiting' then redis.call('ZREM', KEYS[8], ARGV[1]) end
  if h[17] then redis.call('ZREM', KEYS[6], ARGV[1]) end
  if h[8] == '0' then redis.call('ZREM', KEYS[7], ARGV[1]) end
  redis.call('ZADD', KEYS[10], t, ARGV[1])
  event(KEYS[3], ARGV[6], 'paused', pause_text(pfield, pz), t)
  return { 'paused', pfield, pz }
end

-- Can this worker serve the run at all? If not, give it back without spending a fence.
if ARGV[7] ~= '' then
  local wf, wfv = h[9] or '', tonumber(h[10] or '0')
  local served = false
  local at = string.find(ARGV[7], '\31' .. wf .. '\30', 1, true)
  if at then
    local lo, hi = string.match(ARGV[7], '^(%d+)\30(%d+)\31', at + #wf + 2)
    served = lo ~= nil and wfv >= tonumber(lo) and wfv <= tonumber(hi)
  end
  local reason = nil
  if not served then
    reason = 'waiting for a worker that serves ' .. wf .. ' v' .. tostring(wfv)
  elseif (h[11] or '') ~= ARGV[8] then
    reason = 'waiting for a worker that reads checkpoint schema v' .. (h[11] or '?')
  else
    for f in string.gmatch(h[23] or '', '[^\31]+') do
      if not string.find(ARGV[13], '\31' .. f .. '\31', 1, true) then
        reason = 'waiting for a worker that knows the run feature ' .. f .. ' (a newer build)'
        break
      end
    end
  end
  if reason then
    local n = tonumber(h[17] or '0')
    -- A worker joined since the last give-back (wake_unserved): start the back-off over.
    local woke = tonumber(redis.call('ZSCORE', KEYS[6], '#woke') or '0')
    if woke > tonumber(h[18] or '0') then n = 0 end
    local delay = math.min(tonumber(ARGV[10]) * (2 ^ math.min(n, 20)), tonumber(ARGV[11]))
    local due = t + delay
    redis.call('HSET', KEYS[1], 'due', due, 'waiting_for', reason, 'unserved_n', n + 1, 'rv', rv,
      'unserved_at', t)
    redis.call('ZADD', KEYS[2], due, ARGV[1])
    redis.call('ZADD', KEYS[6], t, ARGV[1])
    if n == 0 then event(KEYS[3], ARGV[6], 'unserved', reason, t) end
    return { 'unserved', reason, tostring(delay), wf, tostring(wfv), tostring(rv), tostring(n + 1) }
  end
end

-- Crash accounting: a takeover means the previous slice did not end cleanly.
local takeover = status == 'running'
local cstep = tonumber(h[13] or '-1')
local crashes = tonumber(h[14] or '0')
local crashed_by = h[15] or ''
if takeover then
  if steps == cstep then crashes = crashes + 1 else crashes, crashed_by = 1, '' end
  crashed_by = crashed_by == '' and (h[3] or '') or (crashed_by .. ', ' .. (h[3] or ''))
elseif steps ~= cstep then
  crashes, crashed_by = 0, ''
end
if crashes >= tonumber(ARGV[9]) then
  local at = 'entry ' .. tostring(steps)
  local cur = h[16] or ''
  local prefix = tostring(steps) .. ' '
  if string.sub(cur, 1, #prefix) == prefix then at = at .. ' (' .. string.sub(cur, #prefix + 1) .. ')' end
  local reason = 'crashed ' .. tostring(crashes) .. ' times at ' .. at ..
    ' without progress; workers: ' .. crashed_by
  redis.call('HSET', KEYS[1], 'status', 'blocked', 'owner', '', 'lease', 0, 'ver', tonumber(h[7]) + 1,
    'updated', t, 'reason', reason, 'bk', 'poison', 'crashes', crashes, 'crashed_by', crashed_by, 'rv', rv)
  -- (A blocked run that keeps a wait takes answers: this one must not.)
  redis.call('HDEL', KEYS[1], 'due', 'wait_kind', 'wait_name', 'wait_payload')
  redis.call('ZREM', KEYS[2], ARGV[1])
  redis.call('ZADD', KEYS[5], t, ARGV[1])
  event(KEYS[3], ARGV[6], 'blocked', reason, t)
  return { 'poison', reason }
end

local fence = tonumber(h[5]) + 1
local lease = t + tonumber(ARGV[3])
local due = lease + tonumber(ARGV[4])
redis.call('HSET', KEYS[1], 'status', 'running', 'owner', ARGV[2], 'fence', fence, 'lease', lease,
  'ver', tonumber(h[7]) + 1, 'attempt', tonumber(h[8]) + 1, 'updated', t, 'due', due, 'rv', rv,
  'cstep', steps)
-- Bookkeeping fields exist only while they say something (a run's hash stays small).
if crashes > 0 then
  redis.call('HSET', KEYS[1], 'crashes', crashes, 'crashed_by', crashed_by)
elseif h[14] then
  redis.call('HDEL', KEYS[1], 'crashes', 'crashed_by')
end
if h[19] then redis.call('HDEL', KEYS[1], 'rings') end
redis.call('ZADD', KEYS[2], due, ARGV[1])
if h[17] then redis.call('ZREM', KEYS[6], ARGV[1]) end
-- A wait whose deadline passed: the run goes on (to record the timeout) and waits no more.
if status == 'waiting' then redis.call('ZREM', KEYS[8], ARGV[1]) end
-- The start task reached a worker: its confirm may still be on its way; no net needed.
if h[8] == '0' then redis.call('ZREM', KEYS[7], ARGV[1]) end
if takeover then
  event(KEYS[3], ARGV[6], 'takeover', ARGV[2] .. ' took the expired lease of ' .. h[3], t)
else
  event(KEYS[3], ARGV[6], 'claimed', ARGV[2], t)
end
local fields, from = incremental_fields(KEYS[1], ARGV[14], steps)
if not fields then fields, from = redis.call('HGETALL', KEYS[1]), '' end
-- The back-off bookkeeping of the previous slice is handed to this one, then cleared.
if h[20] or h[21] or h[17] then
  redis.call('HDEL', KEYS[1], 'wait_fx', 'wait_fx_n', 'waiting_for', 'unserved_n', 'unserved_at')
end
return { 'ok', t, fields, redis.call('HGETALL', KEYS[4]), takeover and 1 or 0, crashes, from }
