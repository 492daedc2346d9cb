-- register_worker: a live worker says which workflows and versions it serves; the entry
-- lives for ttl_ms unless refreshed, so the catalog follows the fleet (a rollback makes new
-- runs start at the version that is served again). Expired entries are pruned.
-- KEYS: 1 workers hash
-- ARGV: 1 worker incarnation, 2 registration (JSON), 3 ttl_ms ('' or 0 = remove the entry)
-- Returns: number of live workers after the change
local t = now_ms()
if ARGV[3] == '' or tonumber(ARGV[3]) == 0 then
  redis.call('HDEL', KEYS[1], ARGV[1])
else
  redis.call('HSET', KEYS[1], ARGV[1], tostring(t + tonumber(ARGV[3])) .. '\31' .. ARGV[2])
end
local all = redis.call('HGETALL', KEYS[1])
local live = 0
for i = 1, #all, 2 do
  local until_ms = tonumber(string.match(all[i + 1], '^(%d+)\31'))
  if until_ms and until_ms > t then live = live + 1 else redis.call('HDEL', KEYS[1], all[i]) end
end
return live
