-- Read what the static (beat_schedule) entries have in Redis, for the start-up sync.
--
-- KEYS[1] - schedule sorted set
-- KEYS[2] - statics set (entry names)
-- ARGV[1] - the entry keys of the configured statics, one JSON array
--
-- returns {'ok', JSON text}: [[recorded static name, ...], [[meta|null, score|null], ...]]
-- with the pairs in the order of the keys given, the score a decimal string (cjson
-- would round a number); one argument and one text in place of thousands of each,
-- which cost the client far more than Redis
local stored = {}
for i, key in ipairs(cjson.decode(ARGV[1])) do
  local meta = redis.pcall('HGET', key, 'meta')
  if type(meta) ~= 'string' then
    meta = cjson.null  -- no such field, or the key is not a hash: the sync rewrites it
  end
  stored[i] = {meta, redis.call('ZSCORE', KEYS[1], key) or cjson.null}
end
-- cjson writes an empty table as {}: the client reads that as an empty list
return {'ok', cjson.encode({redis.call('SMEMBERS', KEYS[2]), stored})}
