-- effect_intent: record the intent to perform an effect under its idempotency key (SET NX).
-- Only the winner performs the effect.
-- KEYS: 1 effect dedup record
-- ARGV: 1 thread id, 2 journal index, 3 fence, 4 ttl_ms, 5 mode (claim | takeover)
-- Returns: {'won'} | {'done', result JSON, thread} (already applied: record it, skip)
--        | {'in_doubt', holder fence} (this run's earlier attempt recorded the intent and died:
--          outcome unknown) | {'busy', holder thread} (another run holds the intent)
local cur = redis.call('GET', KEYS[1])
local function intent()
  redis.call('SET', KEYS[1], cjson.encode({ state = 'intent', thread = ARGV[1],
    index = tonumber(ARGV[2]), fence = tonumber(ARGV[3]), at = now_ms() }), 'PX', ARGV[4])
  return { 'won' }
end
if not cur then return intent() end
local v = cjson.decode(cur)
if v.state == 'done' then return { 'done', v.result, v.thread } end
if v.thread == ARGV[1] and tonumber(v.index) == tonumber(ARGV[2]) then
  if tonumber(v.fence) == tonumber(ARGV[3]) or ARGV[5] == 'takeover' then return intent() end
  return { 'in_doubt', tostring(v.fence) }
end
return { 'busy', v.thread }
