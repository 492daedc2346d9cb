-- audit: record in a run's event log who asked for an operator action (the API token's
-- name), before the action runs, so no action goes unrecorded.
-- KEYS: 1 run hash, 2 run event list
-- Also notes lineage on a source run (`forked`: the fork's id and entry).
-- ARGV: 1 event cap, 2 detail ("<token name>: <action>"), 3 event type (operator | forked)
-- Returns: {'ok'} | {'missing'}
if not redis.call('HGET', KEYS[1], 'status') then return { 'missing' } end
event(KEYS[2], ARGV[1], ARGV[3], ARGV[2], now_ms())
return { 'ok' }
