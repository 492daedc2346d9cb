-- effect_reopen: a result settled for this run's effect outside a worker's own call (an
-- operator's "applied" with a result, or a reconcile answer) that the workflow code cannot
-- decode is taken back: the done record becomes an in-doubt intent of the run (at its journal
-- index and fence), so the run blocks on the key and the operator resolves it again, with a
-- result of the right shape. Only settled records (index -1) of this same run are reopened:
-- a result a worker recorded is what the provider returned, and another run's record is not
-- this run's to take.
-- KEYS: 1 effect dedup record
-- ARGV: 1 thread id, 2 journal index, 3 fence
-- Returns: {'ok'} | {'no', state} (not an operator's done record: nothing changed)
local cur = redis.call('GET', KEYS[1])
if not cur then return { 'no', 'absent' } end
local v = cjson.decode(cur)
if v.state ~= 'done' or tonumber(v.index) ~= -1 or v.thread ~= ARGV[1] then return { 'no', v.state } end
redis.call('SET', KEYS[1], cjson.encode({ state = 'intent', thread = ARGV[1], index = tonumber(ARGV[2]),
  fence = tonumber(ARGV[3]), at = now_ms(), rejected = v.result }))
return { 'ok' }
