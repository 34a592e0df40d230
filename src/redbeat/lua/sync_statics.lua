-- Write the beat_schedule (static) entries and delete the statics no longer
-- configured, only while this node holds the lock: a standby never rewrites them.
--
-- KEYS[1] - schedule sorted set
-- KEYS[2] - lock key
-- KEYS[3] - statics set (entry names)
-- ARGV[1] - lock token ('' when locking is disabled)
-- ARGV[2] - the entries to write, one JSON array of
--           [key, name, definition JSON, meta JSON, score, changed JSON, policy JSON,
--           labels JSON];
--           the meta is written only when the hash has none, so last_run_at and
--           total_run_count survive; the score is a decimal string; an empty policy
--           removes the field (the static no longer sets one); labels as save.lua
--           takes them ('' keeps the stored ones, '[]' removes them); the changed
--           record is also the 'created' one of a hash written the first time
-- ARGV[3] - the statics to remove, one JSON array of [key, name]
--
-- returns {'ok'}, or {'lost', holder|false} when another node holds the lock
local lost = ARGV[1] ~= '' and lease_lost(KEYS[2], ARGV[1])
if lost then
  return lost
end
-- Scores and names are collected and added with one ZADD and one SADD per chunk (below
-- Lua's unpack limit).
local scores, names = {}, {}
for _, static in ipairs(cjson.decode(ARGV[2])) do
  local key = static[1]
  if redis.call('EXISTS', key) == 0 then
    redis.call('HSET', key, 'created', static[6])
  end
  local written = redis.pcall('HSET', key, 'definition', static[3], 'changed', static[6])
  if type(written) == 'table' and written.err then
    redis.call('DEL', key)  -- not a hash: the configured entry replaces whatever it held
    redis.call('HSET', key, 'definition', static[3], 'changed', static[6])
  end
  redis.call('HSETNX', key, 'meta', static[4])
  if static[7] ~= '' then
    redis.call('HSET', key, 'policy', static[7])
  else
    redis.call('HDEL', key, 'policy')
  end
  if static[8] == '[]' then
    redis.call('HDEL', key, 'labels')
  elseif static[8] ~= '' then
    redis.call('HSET', key, 'labels', static[8])
  end
  redis.call('HDEL', key, 'quarantine')
  scores[#scores + 1] = static[5]
  scores[#scores + 1] = key
  names[#names + 1] = static[2]
end
flush('ZADD', KEYS[1], scores)
flush('SADD', KEYS[3], names)
for _, removed in ipairs(cjson.decode(ARGV[3])) do
  redis.call('DEL', removed[1])
  redis.call('ZREM', KEYS[1], removed[1])
  redis.call('SREM', KEYS[3], removed[2])
end
return {'ok'}
