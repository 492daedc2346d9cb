-- effect_sweep: the janitor gives the effect TTL (the dedup window) to a done record that has
-- no expiry and whose owning run has ended or is gone (the sweeper read that in another
-- command). Such a record is kept without expiry only while its run may still replay the
-- call; a run that ended without journaling it (a restart dropped the entry, a run that failed,
-- a worker that died between the commit and the expiry, a cancel whose scheduler died before
-- settling its keys) left it behind. Only if it is still that owner's done record without
-- expiry: anything else changed meanwhile, and is left as it is.
-- KEYS: 1 effect dedup record
-- ARGV: 1 owner thread (as read), 2 ttl_ms
-- Returns: {'ok'} | {'no', why}
local cur = redis.call('GET', KEYS[1])
if not cur then return { 'no', 'absent' } end
local v = cjson.decode(cur)
if v.state ~= 'done' then return { 'no', tostring(v.state) } end
if v.thread ~= ARGV[1] then return { 'no', 'owner' } end
if redis.call('PTTL', KEYS[1]) >= 0 then return { 'no', 'expiring' } end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return { 'ok' }
