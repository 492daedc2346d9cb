-- effect_done: mark an effect applied and keep its result, so any later attempt (a resumed
-- run, a redelivered task, another run with the same key) records the result instead of
-- repeating the effect.
-- KEYS: 1 effect dedup record
-- ARGV: 1 thread id, 2 journal index ('' = operator: any holder), 3 result (JSON), 4 ttl_ms
-- Returns: {'ok'} | {'already', result JSON} (was done before: keep the first result)
--        | {'not_owner', holder thread}
local cur = redis.call('GET', KEYS[1])
if cur then
  local v = cjson.decode(cur)
  if v.state == 'done' then return { 'already', v.result } end
  if ARGV[2] ~= '' and (v.thread ~= ARGV[1] or tonumber(v.index) ~= tonumber(ARGV[2])) then
    return { 'not_owner', v.thread }
  end
end
redis.call('SET', KEYS[1], cjson.encode({ state = 'done', thread = ARGV[1],
  index = tonumber(ARGV[2]) or -1, result = ARGV[3], at = now_ms() }), 'PX', ARGV[4])
return { 'ok' }
