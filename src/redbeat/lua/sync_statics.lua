-- Write the beat_schedule (static) entries and delete the statics no longer
-- configured, only while this node holds the lock: a standby never rewrites them.
--
-- KEYS[1] - schedule sorted set
-- KEYS[2] - lock key
-- KEYS[3] - statics set (entry names)
-- ARGV[1] - lock token ('' when locking is disabled)
-- ARGV[2] - number of entries to write (E)
-- ARGV[3..] - E groups of: key, name, definition JSON, meta JSON (written only when
--             the hash has none, so last_run_at/total_run_count survive), score,
--             changed JSON
-- then    - groups of: key, name, for the statics to remove
--
-- returns 'ok' or 'lost'
local token = ARGV[1]
if token ~= '' and redis.call('GET', KEYS[2]) ~= token then
  return 'lost'
end
local count = tonumber(ARGV[2])
local i = 3
for _ = 1, count do
  local key, name = ARGV[i], ARGV[i + 1]
  redis.call('HSET', key, 'definition', ARGV[i + 2], 'changed', ARGV[i + 5])
  redis.call('HSETNX', key, 'meta', ARGV[i + 3])
  redis.call('HDEL', key, 'quarantine')
  redis.call('ZADD', KEYS[1], ARGV[i + 4], key)
  redis.call('SADD', KEYS[3], name)
  i = i + 6
end
while i <= #ARGV do
  redis.call('DEL', ARGV[i])
  redis.call('ZREM', KEYS[1], ARGV[i])
  redis.call('SREM', KEYS[3], ARGV[i + 1])
  i = i + 2
end
return 'ok'
