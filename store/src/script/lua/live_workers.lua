-- live_workers: the registrations of workers whose entry has not expired (server time).
-- KEYS: 1 workers hash
-- ARGV: none
-- Returns: {server_now_ms, incarnation, until_ms, registration JSON, …}
local t = now_ms()
local all = redis.call('HGETALL', KEYS[1])
local out = { t }
for i = 1, #all, 2 do
  local until_ms, reg = string.match(all[i + 1], '^(%d+)\31(.*)$')
  if until_ms and tonumber(until_ms) > t then
    table.insert(out, all[i])
    table.insert(out, until_ms)
    table.insert(out, reg)
  end
end
return out
