-- effect_intent: record the intent to perform an effect under its idempotency key (SET NX).
-- Only the winner performs the effect. An intent never expires: it is settled by done,
-- release, or an operator, because an intent that vanished would let the effect run twice.
-- KEYS: 1 effect dedup record
-- ARGV: 1 thread id, 2 journal index, 3 fence, 4 mode (claim | takeover)
-- Returns: {'won'} (also for a retried write of our own intent)
--        | {'done', result JSON, thread} (already applied: record it, skip)
--        | {'in_doubt', thread, index, fence} (this run's earlier attempt recorded the intent
--          and did not finish: outcome unknown; `takeover` re-arms it for this fence)
--        | {'stale', fence} (a newer attempt of this run holds it: the caller is fenced out)
--        | {'self', index} (this attempt holds the key at another index: used twice at once)
--        | {'orphaned', thread, index, fence, owner status} (its owner ended while holding it)
--        | {'busy', thread, index, fence} (another run holds the intent)
local cur = redis.call('GET', KEYS[1])
local me, idx, fence = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local function intent()
  redis.call('SET', KEYS[1], cjson.encode({ state = 'intent', thread = me, index = idx,
    fence = fence, at = now_ms() }))
  return { 'won' }
end
if not cur then return intent() end
local v = cjson.decode(cur)
if v.state == 'done' then return { 'done', v.result, v.thread } end
local vf, vi = tonumber(v.fence) or 0, tonumber(v.index) or -1
if v.state == 'orphaned' then
  return { 'orphaned', v.thread, tostring(vi), tostring(vf), v.owner_status or '' }
end
if v.thread == me then
  if vf > fence then return { 'stale', tostring(vf) } end
  if vf == fence then
    if vi == idx then return intent() end
    return { 'self', tostring(vi) }
  end
  -- An earlier, dead attempt of this run holds it (at this index or, after a code change,
  -- another one): in doubt. Only a higher fence may take it over.
  if ARGV[4] == 'takeover' then return intent() end
  return { 'in_doubt', v.thread, tostring(vi), tostring(vf) }
end
return { 'busy', v.thread, tostring(vi), tostring(vf) }
