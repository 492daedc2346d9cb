-- effect_expire: a run journaled an effect's entry, so the key's done record is no longer the
-- only proof the effect happened. The owner's entry (the run and index that recorded it, or
-- the run an operator or a reconcile settled it for, index -1) marks the record journaled and
-- gives it the effect TTL, the dedup window. Another run that found it done (a shared key, a
-- fork) gives it the TTL only once the owner has journaled it: until then the owner, however
-- long it is stopped, still needs it. Never an intent or an orphaned record (they must not
-- expire: the effect could run twice), nor an absent key.
-- KEYS: 1 effect dedup record
-- ARGV: 1 thread id, 2 journal index, 3 ttl_ms
-- Returns: {'ok'} | {'no', why}
local cur = redis.call('GET', KEYS[1])
if not cur then return { 'no', 'absent' } end
local v = cjson.decode(cur)
if v.state ~= 'done' then return { 'no', v.state } end
local idx = tonumber(v.index) or -1
if v.thread == ARGV[1] and (idx == tonumber(ARGV[2]) or idx == -1) then
  if not v.journaled then
    v.journaled = 1
    redis.call('SET', KEYS[1], cjson.encode(v), 'PX', ARGV[3])
  else
    redis.call('PEXPIRE', KEYS[1], ARGV[3])
  end
  return { 'ok' }
end
-- (A record an older build wrote carries its TTL already: refreshed like a journaled one.)
if v.journaled or redis.call('PTTL', KEYS[1]) >= 0 then
  redis.call('PEXPIRE', KEYS[1], ARGV[3])
  return { 'ok' }
end
return { 'no', 'owner_has_not_journaled_it' }
