-- Delete one entry for the operator (``redbeat delete``, manage.delete_entry) in one
-- atomic step: its hash, its schedule member and its name among the recorded statics.
--
-- KEYS[1] - the entry's hash
-- KEYS[2] - the schedule (sorted set)
-- KEYS[3] - the recorded static names (set)
-- ARGV[1] - the entry's name
--
-- returns {'ok'} when deleted, {'missing'} when the key holds no entry (nothing is
-- touched: no hash there, or another client's key of another type)
if redis.call('TYPE', KEYS[1])['ok'] ~= 'hash' then
  return {'missing'}
end
redis.call('DEL', KEYS[1])
redis.call('ZREM', KEYS[2], KEYS[1])
redis.call('SREM', KEYS[3], ARGV[1])
return {'ok'}
