-- due_candidates: the overdue runs of one partition (read only): due scores in the past, and
-- runs whose start task was never confirmed (their publisher died or failed); ring.lua then
-- hands them out atomically, with their run hashes declared as keys.
-- KEYS: 1 partition due zset, 2 partition unconfirmed-start zset
-- ARGV: 1 limit
-- Returns: {server_now_ms, thread ids...} (each at most once)
local t = now_ms()
local ids = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', t, 'LIMIT', 0, tonumber(ARGV[1]))
local seen = {}
for _, id in ipairs(ids) do seen[id] = true end
for _, id in ipairs(redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', t, 'LIMIT', 0, tonumber(ARGV[1]))) do
  if not seen[id] then
    table.insert(ids, id)
    seen[id] = true
  end
end
table.insert(ids, 1, t)
return ids
