-- effect_release: drop an intent whose effect is known not to have happened (the effect
-- function returned an error, the attempt stopped before calling it, or an operator
-- resolved it as not applied), so it may run again.
-- KEYS: 1 effect dedup record
-- ARGV: 1 thread id, 2 journal index ('' = operator), 3 fence,
--       4 operator only: the holder it settles, 'thread\31index\31fence' ('' = any)
-- Returns: {'ok'} | {'absent'} | {'done', result JSON} (already applied: nothing released)
--        | {'not_owner', holder thread} | {'changed', holder} (operator: not the one named)
local cur = redis.call('GET', KEYS[1])
if not cur then return { 'absent' } end
local v = cjson.decode(cur)
if v.state == 'done' then return { 'done', v.result } end
if ARGV[2] == '' then
  local holder = v.thread .. '\31' .. tostring(v.index) .. '\31' .. tostring(v.fence)
  if ARGV[4] ~= '' and holder ~= ARGV[4] then return { 'changed', holder } end
else
  -- Only the attempt that took the intent may free it: a fenced-out attempt must not free
  -- an intent that a newer attempt has taken over.
  if v.thread ~= ARGV[1] or tonumber(v.index) ~= tonumber(ARGV[2])
    or tonumber(v.fence) ~= tonumber(ARGV[3]) then
    return { 'not_owner', v.thread }
  end
end
redis.call('DEL', KEYS[1])
return { 'ok' }
