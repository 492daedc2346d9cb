-- wake_unserved: a worker joined the fleet; every run of the partition that some worker
-- gave back as unserved is due now, and its back-off starts over (member '#woke' records
-- when), so a worker that serves it picks it up at once. (Runs it does not serve are given
-- back again, cheaply.)
-- KEYS: 1 partition due zset, 2 partition index of runs given back as unserved
-- ARGV: none
-- Returns: number of runs made due
local t = now_ms()
local ids = redis.call('ZRANGE', KEYS[2], 0, -1)
local n = 0
for _, id in ipairs(ids) do
  if id ~= '#woke' then
    redis.call('ZADD', KEYS[1], t, id)
    n = n + 1
  end
end
redis.call('ZADD', KEYS[2], t, '#woke')
return n
