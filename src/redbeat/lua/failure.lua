-- Record a dispatch Celery or the broker refused for what it is (a TypeError from the
-- task's signature, an argument the serializer cannot encode): the slot is dropped, so
-- without this record it would look exactly like a run that went out.
--
-- KEYS[1] - the entry's hash
-- KEYS[2] - the sorted set of entries with a recorded failure (key -> epoch of the last)
-- ARGV[1] - the failure, one JSON object (task_id, at, at_epoch, reason, node)
-- ARGV[2] - its time, epoch seconds
-- ARGV[3] - how many recent failures the entry keeps
--
-- The entry's 'failures' field becomes {"count": n, "last": {...}, "recent": [...]},
-- newest first. Nothing is written for an entry deleted since it was claimed (the
-- record would recreate its hash). 'meta' is left alone: it keeps 2.4.2's two keys.
-- Only the commands an ACL user of docs/deployments.md has.
--
-- returns {'ok'} when recorded, {'gone'} when the entry is gone
if redis.call('EXISTS', KEYS[1]) == 0 then
  return {'gone'}
end
local record = cjson.decode(ARGV[1])
local keep = tonumber(ARGV[3])
local count, recent = 0, {}
local stored = redis.call('HGET', KEYS[1], 'failures')
if stored then
  local ok, old = pcall(cjson.decode, stored)
  if ok and type(old) == 'table' then
    count = tonumber(old['count']) or 0
    -- another client's count: NaN, inf (cjson cannot write them back) or negative
    if count ~= count or count < 0 or count > 2^53 then
      count = 0
    end
    if type(old['recent']) == 'table' then
      recent = old['recent']
    end
  end
end
local kept = {record}
for i = 1, math.min(#recent, keep - 1) do
  kept[#kept + 1] = recent[i]
end
redis.call('HSET', KEYS[1], 'failures',
           cjson.encode({count = count + 1, last = record, recent = kept}))
redis.call('ZADD', KEYS[2], ARGV[2], KEYS[1])
-- a few of the oldest members whose entry was deleted since are dropped here, so the
-- set does not grow with entries that are gone
local oldest = redis.call('ZRANGE', KEYS[2], 0, 4)
for _, key in ipairs(oldest) do
  if redis.call('EXISTS', key) == 0 then
    redis.call('ZREM', KEYS[2], key)
  end
end
return {'ok'}
