-- Shared helpers, prepended to every script by the Rust loader (store/redis/scripts.rs).
-- Time always comes from the Redis server, never from a worker's clock.
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- Appends one event to a run's capped event log: a list of "<ms>\31<type>\31<detail>"
-- strings (a Redis 7 stream preallocates a 4 KB node per key; a short list costs ~100 B).
-- An empty type records nothing (the journal is the record of plain step commits).
local function event(ev, cap, typ, detail, t)
  if typ == '' then return end
  if redis.call('RPUSH', ev, t .. '\31' .. typ .. '\31' .. detail) > tonumber(cap) then
    redis.call('LTRIM', ev, -tonumber(cap), -1)
  end
end

local terminal = { completed = true, failed = true, cancelled = true, blocked = true }

-- Fencing + compare-and-swap check shared by every write of a lease holder.
-- Returns nil when `owner`/`fence` still hold the lease of a running run and (when `ver` is
-- not '') the version is unchanged; otherwise the rejection reply.
local function check_lease(run, owner, fence, ver)
  local h = redis.call('HMGET', run, 'status', 'owner', 'fence', 'ver', 'steps')
  if not h[1] then return { 'missing' } end
  if h[1] ~= 'running' or h[2] ~= owner or h[3] ~= fence then
    return { 'fenced', h[1], h[2] or '', h[3] or '' }
  end
  if ver ~= '' and h[4] ~= ver then return { 'conflict', h[4] } end
  return nil
end

-- Appends journal entries from index `first` (a string): `entry`, then ARGV[extra..#ARGV] in
-- order (a pipelined batch of a slice's steps travels in one script). Returns the rejection
-- {'index', steps} when the journal does not end at `first`, else nil and the new length.
-- (Fields go out 100 entries an HSET: Lua's unpack has a bound of a few thousand values.)
local function append_entries(run, first, entry, extra)
  local steps = tonumber(redis.call('HGET', run, 'steps'))
  if steps ~= tonumber(first) then return { 'index', steps } end
  local fields = { 'j:' .. steps, entry }
  local n = steps + 1
  for i = extra, #ARGV do
    fields[#fields + 1] = 'j:' .. n
    fields[#fields + 1] = ARGV[i]
    n = n + 1
    if #fields >= 200 then
      redis.call('HSET', run, unpack(fields))
      fields = {}
    end
  end
  fields[#fields + 1] = 'steps'
  fields[#fields + 1] = n
  redis.call('HSET', run, unpack(fields))
  return nil, n
end

-- Deletes a consumed signal or answer field; a named signal also leaves the count of signals
-- the run holds (#n, capped by signal.lua). A child's word (s:child:<index>:…) is not counted.
local function consume_signal(sig, field)
  if redis.call('HDEL', sig, field) == 1 and string.sub(field, 1, 2) == 's:'
      and string.sub(field, 1, 8) ~= 's:child:' then
    if tonumber(redis.call('HGET', sig, '#n') or '0') > 0 then redis.call('HINCRBY', sig, '#n', -1) end
  end
end

-- Makes a run blocked on an in-doubt effect runnable again (its record was settled): pending,
-- due after `redeliver_ms`, out of the blocked index, with an `effect_resolved` event.
-- KEYS of the caller: run hash, partition due zset, run event list, partition blocked index.
-- Returns the new ring version and the run's trace context (for the task it publishes).
local function unblock_run(run, due_set, ev, blocked, thread, ver, redeliver_ms, cap, detail)
  local t = now_ms()
  local due = t + tonumber(redeliver_ms)
  redis.call('HSET', run, 'status', 'pending', 'ver', tonumber(ver) + 1, 'updated', t, 'due', due)
  redis.call('HDEL', run, 'reason', 'bk', 'blocked_fx', 'blocked_fx_owner', 'finished')
  redis.call('ZADD', due_set, due, thread)
  redis.call('ZREM', blocked, thread)
  event(ev, cap, 'effect_resolved', detail, t)
  -- A new due regime: a task published before it (rv seen then) must not mark this run queued.
  local rv = redis.call('HINCRBY', run, 'rv', 1)
  return tostring(rv), redis.call('HGET', run, 'trace') or ''
end

-- Pauses (ARCHITECTURE §16b). A record is 'by\31at_ms\31hold (0|1)\31note'; a run's own is its
-- field `pz`, a workflow's, a version's and a queue's are the fields `w:<wf>`, `v:<wf>@<v>`
-- and `q:<queue>` of the partition's pause hash. Returns the record holding the run and its
-- field ('run' for its own), or nil.
local function pause_of(own, pauses, wf, wfv, q)
  if own and own ~= '' then return own, 'run' end
  -- (Nothing paused in the partition, the common case: one EXISTS, no field names built.)
  if redis.call('EXISTS', pauses) == 0 then return nil end
  local f = { 'w:' .. wf, 'v:' .. wf .. '@' .. wfv, 'q:' .. q }
  local p = redis.call('HMGET', pauses, f[1], f[2], f[3])
  for i = 1, 3 do
    if p[i] then return p[i], f[i] end
  end
  return nil
end

-- 'workflow invoice by alice: provider down' (the event detail of a pause record).
local function pause_text(field, record)
  local by, _, _, note = string.match(record, '^(.-)\31(%d*)\31(%d?)\31(.*)$')
  local scope = 'the run'
  local kind, name = string.sub(field, 1, 1), string.sub(field, 3)
  if kind == 'w' then scope = 'workflow ' .. name
  elseif kind == 'v' then scope = 'workflow version ' .. name
  elseif kind == 'q' then scope = 'queue ' .. (name == '' and '(default)' or name) end
  local s = scope .. ' paused by ' .. (by or '?')
  if note and note ~= '' then s = s .. ': ' .. note end
  return s
end

-- Puts a run a pause stopped back where the pause found it (status `ps`), due now (the
-- scanner rings it at its pace), or, when the record asked to hold timers, with its timer and
-- deadline moved later by the time since the pause. `version` ('' = keep) moves the run to
-- that version of its workflow. KEYS of the caller: run hash, event list, partition due zset,
-- partition waiting index, partition paused index.
local function unpark(run, ev, due_set, waiting, paused, thread, cap, version, detail, t)
  local h = redis.call('HMGET', run, 'ps', 'pzr', 'due', 'deadline', 'ver')
  local ps = h[1] or 'pending'
  local _, at, hold = string.match(h[2] or '', '^(.-)\31(%d*)\31(%d?)\31')
  local due = t
  if hold == '1' and at and at ~= '' then
    local held = math.max(0, t - tonumber(at))
    if h[4] then redis.call('HSET', run, 'deadline', tonumber(h[4]) + held) end
    if ps == 'sleeping' and h[3] then due = math.max(t, tonumber(h[3]) + held) end
  end
  if ps == 'sleeping' then redis.call('HSET', run, 'due', due) end
  redis.call('HSET', run, 'status', ps, 'updated', t, 'ver', tonumber(h[5] or '0') + 1)
  redis.call('HINCRBY', run, 'rv', 1)
  redis.call('HDEL', run, 'ps', 'pzw', 'pzr')
  if version ~= '' then redis.call('HSET', run, 'wfv', version) end
  redis.call('ZADD', due_set, due, thread)
  if ps == 'waiting' then redis.call('ZADD', waiting, t, thread) end
  redis.call('ZREM', paused, thread)
  event(ev, cap, 'unpaused', detail, t)
end

-- A flow key's slots zset and holders hash live as long as their latest slot (its holder's
-- lease expiry, the zset's highest score) and a second more: after that every slot is free,
-- as if the key had never been used (a key of a customer whose runs ended is not kept).
local function expire_slots(slots, holders, t)
  local top = redis.call('ZREVRANGE', slots, 0, 0, 'WITHSCORES')
  if top[2] then
    local ttl = string.format('%d', math.max(1, math.ceil(tonumber(top[2]) - t)) + 1000)
    redis.call('PEXPIRE', slots, ttl)
    redis.call('PEXPIRE', holders, ttl)
  end
end
