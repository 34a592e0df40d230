-- How many slots are held and the first ARGV[1] of them (the oldest due first), for
-- `redbeat status` and the web view: read, never written, so a probe run against a fleet
-- still on an earlier release reads its hash too (prelude: adopt_held_shapes).
--
-- KEYS[1] - pending index (task id scored by due time; each record at
--           <KEYS[1]>:<task id>), or the hash of task id -> record of earlier releases
-- ARGV[1] - how many records to return (0: only the count)
-- returns {'ok', count, task id, record ('' when missing), ...}
local limit = tonumber(ARGV[1])
local kind = redis.call('TYPE', KEYS[1]).ok
if kind == 'hash' then
  local reply = {'ok', redis.call('HLEN', KEYS[1])}
  if limit > 0 then
    local page = redis.call('HSCAN', KEYS[1], 0, 'COUNT', limit)[2]
    for i = 1, math.min(#page, 2 * limit) do
      reply[#reply + 1] = page[i]
    end
  end
  return reply
elseif kind == 'none' then
  return {'ok', 0}
end
local reply = {'ok', redis.call('ZCARD', KEYS[1])}
if limit > 0 then
  for _, task_id in ipairs(redis.call('ZRANGE', KEYS[1], 0, limit - 1)) do
    reply[#reply + 1] = task_id
    reply[#reply + 1] = redis.call('GET', record_key(KEYS[1], task_id)) or ''
  end
end
return reply
