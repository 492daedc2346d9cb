-- effect_release: drop an intent whose effect is known not to have happened (the effect
-- function returned an error, or an operator resolved it as not applied), so it may run again.
-- KEYS: 1 effect dedup record
-- ARGV: 1 thread id, 2 journal index ('' = operator: any holder), 3 fence ('' = any)
-- Returns: {'ok'} | {'absent'} | {'done'} (already applied: nothing released)
--        | {'not_owner', holder thread}
local cur = redis.call('GET', KEYS[1])
if not cur then return { 'absent' } end
local v = cjson.decode(cur)
if v.state == 'done' then return { 'done' } end
if ARGV[2] ~= '' and (v.thread ~= ARGV[1] or tonumber(v.index) ~= tonumber(ARGV[2])) then
  return { 'not_owner', v.thread }
end
-- A fenced-out attempt must not free an intent that a newer attempt has taken over.
if ARGV[3] ~= '' and tonumber(v.fence) ~= tonumber(ARGV[3]) then return { 'not_owner', v.thread } end
redis.call('DEL', KEYS[1])
return { 'ok' }
