-- sched_state: pause (with a note), resume (from a next firing the caller computed from now:
-- firings missed while paused are not made up) or delete a schedule.
-- KEYS: 1 schedule hash, 2 next-firing index, 3 buffered index, 4 index of all schedules,
--       5 pending index
-- ARGV: 1 schedule id, 2 action (pause | resume | delete), 3 note (pause) or next firing
--       (resume, ms; '' = none)
-- Returns: {'ok'} | {'missing'}
if redis.call('EXISTS', KEYS[1]) == 0 then return { 'missing' } end
if ARGV[2] == 'delete' then
  redis.call('DEL', KEYS[1])
  redis.call('ZREM', KEYS[2], ARGV[1])
  redis.call('ZREM', KEYS[3], ARGV[1])
  redis.call('ZREM', KEYS[4], ARGV[1])
  redis.call('ZREM', KEYS[5], ARGV[1])
elseif ARGV[2] == 'pause' then
  -- (`next` stays in the hash: a firing under way when it was paused still advances it and
  -- counts its run; the schedule is out of the index, so it fires no more.)
  redis.call('HSET', KEYS[1], 'paused', now_ms(), 'note', ARGV[3])
  redis.call('ZREM', KEYS[2], ARGV[1])
else
  redis.call('HDEL', KEYS[1], 'paused', 'note')
  if ARGV[3] ~= '' then
    redis.call('HSET', KEYS[1], 'next', ARGV[3])
    redis.call('ZADD', KEYS[2], ARGV[3], ARGV[1])
  else
    redis.call('HDEL', KEYS[1], 'next')
  end
end
return { 'ok' }
