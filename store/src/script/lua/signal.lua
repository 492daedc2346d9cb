-- signal: deliver a resume value (answer to the pending interrupt) or a named signal.
-- KEYS: 1 run hash, 2 partition due zset, 3 run event list, 4 run signals hash,
--       5 partition waiting index, 6 partition blocked index, 7 the run's client ids (hash)
-- A run blocked because the value it was given did not decode keeps its wait and takes a new
-- one like a waiting run (it leaves the blocked index and loses its reason and block kind).
-- ARGV: 1 thread id, 2 kind (interrupt | signal), 3 name ('' = the pending interrupt),
--       4 value (JSON), 5 redeliver_ms, 6 event cap, 7 client id ('' = none: not deduplicated),
--       8 most named signals the run may hold unconsumed (#n counts them), 9 how long the
--       client ids live after the last one (ms: the retention)
-- Returns: {'woke', name, rv, trace} (run is pending again: publish a task) | {'buffered', name}
--        | {'duplicate', name} (this client id was delivered before: nothing changed)
--        | {'missing'} | {'terminal', status} | {'not_waiting', status, wait kind, wait name}
--        | {'full', held} (the run holds ARGV[8] signals it has not asked for: nothing changed)
--        | {'settled', name} (kind child: the parent's call already journaled the child, so
--          the word has no reader and is not kept)
-- Client ids are kept in their own hash (KEYS[7], id -> name), which lives a retention past
-- the last one: a claim reads the signals hash, and a parent of 100k children would otherwise
-- carry 100k ids in every claim. Builds before this kept them in the signals hash as d:<id>:
-- those are honoured too.
local function remember(id, what)
  redis.call('HSET', KEYS[7], id, what)
  redis.call('PEXPIRE', KEYS[7], ARGV[9])
end
local h = redis.call('HMGET', KEYS[1], 'status', 'wait_kind', 'wait_name', 'ver', 'ps')
-- A run a pause stopped while it waited (its wait's deadline had passed) still takes the
-- answer it waited for: kept, and the run is put back as pending when it is resumed.
local held = h[1] == 'paused'
if held then h[1] = h[5] or 'pending' end
if not h[1] then return { 'missing' } end
-- (A blocked run that kept its wait still takes an answer, below.)
if terminal[h[1]] and not (h[1] == 'blocked' and h[2]) then return { 'terminal', h[1] } end
local kind, name = ARGV[2], ARGV[3]
if ARGV[7] ~= '' then
  local seen = redis.call('HGET', KEYS[7], ARGV[7]) or redis.call('HGET', KEYS[4], 'd:' .. ARGV[7])
  if seen then return { 'duplicate', seen } end
end
local waiting = (h[1] == 'waiting' or h[1] == 'blocked') and h[2] == kind
if kind == 'interrupt' then
  if not waiting or (name ~= '' and name ~= h[3]) then
    return { 'not_waiting', h[1], h[2] or '', h[3] or '' }
  end
  name = h[3]
  redis.call('HSET', KEYS[4], 'i:' .. name, ARGV[4])
elseif kind == 'child' then
  -- A child's word (name child:<call index>) has one reader: the parent's call at that
  -- index, while it is not journaled. Once it is (a start_child, or an awaited child whose
  -- outcome the parent read at its poll), nobody will consume the word: it is not kept.
  -- Otherwise it is the call's one word (one child per call, deduplicated by its id), in a
  -- field of its own that the commit of the call's entry always deletes, and not counted
  -- among the signals the run holds (there are at most as many as its child calls).
  local index = string.match(name, '^child:(%d+)$')
  if index and redis.call('HEXISTS', KEYS[1], 'j:' .. index) == 1 then
    if ARGV[7] ~= '' then remember(ARGV[7], name) end
    return { 'settled', name }
  end
  redis.call('HSET', KEYS[4], 's:' .. name .. ':0', ARGV[4])
else
  local held = tonumber(redis.call('HGET', KEYS[4], '#n') or '0')
  if held >= tonumber(ARGV[8]) then return { 'full', tostring(held) } end
  redis.call('HINCRBY', KEYS[4], '#n', 1)
  local seq = redis.call('HINCRBY', KEYS[4], '#seq', 1)
  redis.call('HSET', KEYS[4], string.format('s:%s:%010d', name, seq), ARGV[4])
end
local t = now_ms()
if ARGV[7] ~= '' then remember(ARGV[7], name) end
if waiting and h[3] == name and held then
  redis.call('HSET', KEYS[1], 'ps', 'pending', 'updated', t)
  redis.call('ZREM', KEYS[5], ARGV[1])
  event(KEYS[3], ARGV[6], kind == 'interrupt' and 'resumed' or 'signalled', name .. ' (kept: the run is paused)', t)
  return { 'buffered', name }
end
if waiting and h[3] == name then
  local due = t + tonumber(ARGV[5])
  redis.call('HSET', KEYS[1], 'status', 'pending', 'ver', tonumber(h[4]) + 1, 'updated', t, 'due', due)
  redis.call('ZADD', KEYS[2], due, ARGV[1])
  redis.call('ZREM', KEYS[5], ARGV[1])
  if h[1] == 'blocked' then
    redis.call('ZREM', KEYS[6], ARGV[1])
    redis.call('HDEL', KEYS[1], 'reason', 'bk')
  end
  event(KEYS[3], ARGV[6], kind == 'interrupt' and 'resumed' or 'signalled', name, t)
  -- A new due regime: a task published before it (rv seen then) must not mark this run queued.
  local rv = redis.call('HINCRBY', KEYS[1], 'rv', 1)
  local w = { tostring(rv), redis.call('HGET', KEYS[1], 'trace') }
  return { 'woke', name, w[1] or '0', w[2] or '' }
end
event(KEYS[3], ARGV[6], 'signal_buffered', name, t)
return { 'buffered', name }
