-- restart: an operator re-runs a failed, blocked or cancelled run in place from journal entry
-- N: entries 0..N-1 are kept (replayed: their steps and effects are not run again), entries
-- N.. are dropped with the bookkeeping of their calls (retry counts t:, begin records x:,
-- effect names n:, unused-intent marks u:), the end state is cleared, and the run is pending
-- again with its keys' expiry removed. Effects after N run again under the code's keys: a key settled before is
-- not performed again (its recorded result is returned), a new key is.
-- KEYS: 1 run hash, 2 partition due zset, 3 run event list, 4 run signals hash,
--       5 partition blocked index, 6 partition waiting index
-- ARGV: 1 thread id, 2 N, 3 redeliver_ms, 4 event cap, 5 event detail
-- Returns: {'ok', rv, trace, old status} | {'missing'} | {'status', status} (not restartable)
--        | {'effect', key} (blocked on an in-doubt effect: resolve it first)
--        | {'range', steps} (N is past the journal)
local h = redis.call('HMGET', KEYS[1], 'status', 'blocked_fx', 'ver', 'steps', 'restarts')
if not h[1] then return { 'missing' } end
local status = h[1]
if status ~= 'failed' and status ~= 'blocked' and status ~= 'cancelled' then return { 'status', status } end
if h[2] and h[2] ~= '' then return { 'effect', h[2] } end
local n, steps = tonumber(ARGV[2]), tonumber(h[4])
if n > steps then return { 'range', h[4] } end
for i = n, steps - 1 do redis.call('HDEL', KEYS[1], 'j:' .. i) end
for _, f in ipairs(redis.call('HKEYS', KEYS[1])) do
  local kind, idx = string.match(f, '^([xntu]):(%d+)$')
  if kind and tonumber(idx) >= n then redis.call('HDEL', KEYS[1], f) end
end
local t = now_ms()
local due = t + tonumber(ARGV[3])
redis.call('HSET', KEYS[1], 'status', 'pending', 'steps', n, 'ver', tonumber(h[3]) + 1, 'updated', t,
  'due', due, 'owner', '', 'lease', 0, 'restarts', tonumber(h[5] or '0') + 1, 'restarted_from', n)
redis.call('HDEL', KEYS[1], 'pz', 'ps', 'pzw', 'pzr')
redis.call('HDEL', KEYS[1], 'output', 'ov', 'error', 'reason', 'bk', 'finished', 'blocked_fx', 'blocked_fx_owner',
  'crashes', 'crashed_by', 'cstep', 'cur', 'wait_kind', 'wait_name', 'wait_payload', 'deadline',
  'waiting_for', 'wait_fx', 'wait_fx_n', 'unserved_n', 'unserved_at')
for i = 1, 4 do
  if i ~= 2 then redis.call('PERSIST', KEYS[i]) end
end
redis.call('ZADD', KEYS[2], due, ARGV[1])
redis.call('ZREM', KEYS[5], ARGV[1])
redis.call('ZREM', KEYS[6], ARGV[1])
event(KEYS[3], ARGV[4], 'restarted', 'from entry ' .. n .. ' (was ' .. status .. '): ' .. ARGV[5], t)
local rv = redis.call('HINCRBY', KEYS[1], 'rv', 1)
return { 'ok', tostring(rv), redis.call('HGET', KEYS[1], 'trace') or '', status }
