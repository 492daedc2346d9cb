-- pause_put: write or lift one workflow, version or queue pause in one pause hash: the
-- namespace's catalog or a partition's copy (§16b).
-- KEYS: 1 the pause hash
-- ARGV: 1 field ('w:<wf>', 'v:<wf>@<version>', 'q:<queue>'), 2 the record 'by\31at\31hold\31note'
--       (at '' = now, server time) or '' to lift the pause,
--       3 only if the field now holds this record ('' = whatever it holds)
-- Returns: {'ok', previous record or ''} | {'changed', record} (ARGV 3 did not match: nothing
--          written). Lifting a record bumps the hash's `#gen` (the pause sweep walks a
--          partition's stopped runs only when it moved).
local old = redis.call('HGET', KEYS[1], ARGV[1]) or ''
if ARGV[3] ~= '' and old ~= ARGV[3] then return { 'changed', old } end
if ARGV[2] == '' then
  if redis.call('HDEL', KEYS[1], ARGV[1]) == 1 then redis.call('HINCRBY', KEYS[1], '#gen', 1) end
else
  local by, at, rest = string.match(ARGV[2], '^(.-)\31(%d*)\31(.*)$')
  if at == '' then at = tostring(now_ms()) end
  redis.call('HSET', KEYS[1], ARGV[1], by .. '\31' .. at .. '\31' .. rest)
end
return { 'ok', old }
