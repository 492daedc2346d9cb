-- flow_acquire: a claimed run of a flow-controlled key takes one of the key's slots (at most
-- `limit` runs of the key hold one at once), in line: a run may take a free slot only when no
-- more than the free slots' count of runs wait ahead of it (priority first, then the time it
-- first waited). A slot's score is its holder's lease expiry: a slot of a worker that died is
-- free once that passes. A start (a run with no journal yet) also takes a token of the key's
-- start rate, if it has one.
-- A slot belongs to the slice that took it, named by its fencing token (holders hash): a run
-- claimed again (a yield, a takeover) takes over the slot its earlier slice still holds, under
-- its own, higher fence; a slice whose fence is lower than the holder's has lost its run and
-- is told so ('stale'), and neither it nor its release can touch the slot any more.
-- A waiting run is seen again at least every park interval (its safety-net due time rings it);
-- one not seen for `stale` ms (it ended, or was cancelled, while in line) leaves the line, so
-- it cannot hold up the runs behind it for longer than that.
-- KEYS: 1 the key's slots zset, 2 its waiting line zset, 3 its rate bucket hash,
--       4 when each waiting run was last seen (zset), 5 the slots' holders (thread -> fence)
-- ARGV: 1 thread id, 2 limit, 3 slot expiry (ms from now), 4 priority band if it must wait
--       (9 - priority: its line score is band * 1e13 + now, so higher priorities go first), 5 starts per second ('' = no rate), 6 '1' if this is a
--       start (the run has no journal yet), 7 stale ms, 8 the slice's fencing token
-- Returns: {'ok'} | {'full', holders} (it waits in line) | {'rate', wait_ms} (in line, for a token)
--        | {'stale', holder fence} (a later slice of this run holds its slot)
local t = now_ms()
-- The line and its last-seen times live while runs in it are seen: a waiting run is seen at
-- least every park interval, and one not seen for `stale` ms leaves the line anyway.
local function expire_line()
  redis.call('PEXPIRE', KEYS[2], 2 * tonumber(ARGV[7]) + 1000)
  redis.call('PEXPIRE', KEYS[4], 2 * tonumber(ARGV[7]) + 1000)
end
for _, s in ipairs(redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', t)) do
  redis.call('HDEL', KEYS[5], s)
end
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', t)
local id = ARGV[1]
local fence = tonumber(ARGV[8])
local order = tonumber(ARGV[4]) * 1e13 + t
for _, s in ipairs(redis.call('ZRANGEBYSCORE', KEYS[4], '-inf', t - tonumber(ARGV[7]))) do
  redis.call('ZREM', KEYS[2], s)
  redis.call('ZREM', KEYS[4], s)
end
if redis.call('ZSCORE', KEYS[1], id) then
  local held = tonumber(redis.call('HGET', KEYS[5], id) or '0')
  if held > fence then return { 'stale', tostring(held) } end
  redis.call('HSET', KEYS[5], id, ARGV[8])
  redis.call('ZADD', KEYS[1], t + tonumber(ARGV[3]), id)
  expire_slots(KEYS[1], KEYS[5], t)
  return { 'ok' }
end
local held = redis.call('ZCARD', KEYS[1])
local free = tonumber(ARGV[2]) - held
local rank = redis.call('ZRANK', KEYS[2], id) or redis.call('ZCARD', KEYS[2])
if free <= 0 or rank >= free then
  if not redis.call('ZSCORE', KEYS[2], id) then redis.call('ZADD', KEYS[2], order, id) end
  redis.call('ZADD', KEYS[4], t, id)
  expire_line()
  return { 'full', tostring(held) }
end
if ARGV[5] ~= '' and ARGV[6] == '1' then
  local rate = tonumber(ARGV[5])
  local cap = math.max(1, rate)
  local b = redis.call('HMGET', KEYS[3], 'tokens', 'at')
  local tokens = tonumber(b[1] or tostring(cap))
  local at = tonumber(b[2] or tostring(t))
  tokens = math.min(cap, tokens + (t - at) * rate / 1000)
  -- (A bucket gone is a full one: it lives until it would have filled again; at a rate so
  -- low that this is more than a year away, for ever, as before. Whole milliseconds written
  -- as digits: Lua would write a large number as 1e+17, which PEXPIRE refuses.)
  local function keep(left)
    redis.call('HSET', KEYS[3], 'tokens', tostring(left), 'at', t)
    local full_in = math.ceil((cap - left) * 1000 / rate) + 1000
    if full_in <= 31536000000 then
      redis.call('PEXPIRE', KEYS[3], string.format('%d', full_in))
    else
      redis.call('PERSIST', KEYS[3])
    end
  end
  if tokens < 1 then
    keep(tokens)
    if not redis.call('ZSCORE', KEYS[2], id) then redis.call('ZADD', KEYS[2], order, id) end
    redis.call('ZADD', KEYS[4], t, id)
    expire_line()
    return { 'rate', tostring(math.ceil((1 - tokens) * 1000 / rate)) }
  end
  keep(tokens - 1)
end
redis.call('ZREM', KEYS[2], id)
redis.call('ZREM', KEYS[4], id)
redis.call('ZADD', KEYS[1], t + tonumber(ARGV[3]), id)
redis.call('HSET', KEYS[5], id, ARGV[8])
expire_slots(KEYS[1], KEYS[5], t)
return { 'ok' }
