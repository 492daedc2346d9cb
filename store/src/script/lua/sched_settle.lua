-- sched_settle: the pending runs a schedule's last move recorded were created: forget them,
-- only if they are still the ones the caller created (a later move records its own).
-- KEYS: 1 schedule hash, 2 pending index
-- ARGV: 1 schedule id, 2 the pending runs as read (`thread@firing,…`)
-- Returns: {'ok'} | {'moved'}
if redis.call('HGET', KEYS[1], 'pending') ~= ARGV[2] then
  if redis.call('HEXISTS', KEYS[1], 'pending') == 0 then redis.call('ZREM', KEYS[2], ARGV[1]) end
  return { 'moved' }
end
redis.call('HDEL', KEYS[1], 'pending')
redis.call('ZREM', KEYS[2], ARGV[1])
return { 'ok' }
