-- effect_forget: an operator asks that a settled effect be performed again (fork or restart
-- with `rerun_effects`): its done record is deleted, so the next run that reaches the key
-- performs it. Only a done record that `thread` settled is forgotten: an intent (the effect
-- may be happening now) or another run's record is left alone.
-- KEYS: 1 effect dedup record
-- ARGV: 1 the run that settled it
-- Returns: {'ok'} | {'no', state or 'absent'}
local cur = redis.call('GET', KEYS[1])
if not cur then return { 'no', 'absent' } end
local v = cjson.decode(cur)
if v.state ~= 'done' or v.thread ~= ARGV[1] then return { 'no', v.state } end
redis.call('DEL', KEYS[1])
return { 'ok' }
