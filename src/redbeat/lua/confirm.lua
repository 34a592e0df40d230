-- Forget pending slots whose publish the broker accepted (or that were dropped: an
-- unreadable record, a slot past its misfire grace), release the held definitions they
-- named, and count the dropped late slots in their entries' misfires.
--
-- KEYS[1] - pending index (task id scored by due time; each record at
--           <KEYS[1]>:<task id>, see the prelude)
-- KEYS[2] - held definitions index (sha1 -> how many records name it; each text at
--           <KEYS[2]>:<sha1>)
-- ARGV[1] - the task ids, one JSON array (a thousand ids cost the client far more to
--           send as separate arguments than as one)
-- ARGV[2] - held slots dropped past their misfire grace, one JSON array of
--           [entry key, how many, last skipped (ISO 8601 UTC)]; optional
--
-- returns {'ok', the number of slots forgotten}
local ids = cjson.decode(ARGV[1])
local forgotten = 0
local released, named = {}, {}
adopt_held_shapes(KEYS[1], KEYS[2])
for first = 1, #ids, CHUNK do
  redis.call('ZREM', KEYS[1], unpack(ids, first, math.min(first + CHUNK - 1, #ids)))
end
-- When no slot is left held (a burst confirmed whole), every held definition goes
-- (below) and the records need not be read: only their keys are deleted.
local remaining = redis.call('ZCARD', KEYS[1])
for first = 1, #ids, CHUNK do
  local last = math.min(first + CHUNK - 1, #ids)
  -- a record names its definition in its definition_sha1 field (read_pending, in the
  -- prelude); one without it (the old format, with the definition inside, or a
  -- hand-written one) holds no reference
  local records = {}
  for i = first, last do
    records[#records + 1] = record_key(KEYS[1], ids[i])
    if remaining > 0 then
      local message = redis.call('GET', records[#records])
      local sha = message and select(2, read_pending(message))
      if sha then
        if not released[sha] then
          named[#named + 1] = sha
        end
        released[sha] = (released[sha] or 0) + 1
      end
    end
  end
  forgotten = forgotten + redis.call('DEL', unpack(records))
end
-- The counts read and written per definition named (ZSCORE and ZADD, not ZINCRBY: the
-- commands an ACL user of docs/deployments.md has); not at all when no record is left,
-- since then every held definition goes (below).
local zeroed = {}
if remaining > 0 then
  for _, sha in ipairs(named) do
    local left = (tonumber(redis.call('ZSCORE', KEYS[2], sha)) or 0) - released[sha]
    if left <= 0 then
      zeroed[#zeroed + 1] = sha
    else
      redis.call('ZADD', KEYS[2], left, sha)
    end
  end
end
-- A count reaches zero with records still naming the definition when a record written
-- by hand (never counted) was released: deleting the text would make the real held slots
-- unreadable, and they would be dropped unsent. So a definition whose count ran out is
-- deleted only if no record left names it; otherwise its count is set to the records'.
-- (One pass over the records, only when a count ran out while records remain: a broker
-- outage's drain.)
if #zeroed > 0 then
  local naming = {}
  for first = 0, remaining - 1, 1000 do
    for _, task_id in ipairs(redis.call('ZRANGE', KEYS[1], first, first + 999)) do
      local message = redis.call('GET', record_key(KEYS[1], task_id))
      local sha = message and select(2, read_pending(message))
      if sha then
        naming[sha] = (naming[sha] or 0) + 1
      end
    end
  end
  for _, sha in ipairs(zeroed) do
    if naming[sha] then
      redis.call('ZADD', KEYS[2], naming[sha], sha)
    else
      redis.call('ZREM', KEYS[2], sha)
      redis.call('DEL', text_key(KEYS[2], sha))
    end
  end
elseif remaining == 0 then
  -- No record left, so no reference: whatever a record removed by hand left counted
  -- goes, and the definitions whose count ran out with it.
  local texts = {}
  for _, sha in ipairs(redis.call('ZRANGE', KEYS[2], 0, -1)) do
    texts[#texts + 1] = text_key(KEYS[2], sha)
  end
  redis.call('DEL', KEYS[2])
  flush('DEL', KEYS[2], texts)  -- (KEYS[2] again, and the texts a chunk at a time)
end

-- Misfires are counted here, after commit.lua in the same tick, so the misfires it just
-- wrote (computed from the tick's read) are added to, not overwritten. An entry deleted
-- since its slot was claimed has no hash to count in: none is created for it.
for _, miss in ipairs(cjson.decode(ARGV[2] or '[]')) do
  local key, count, skipped_at = miss[1], miss[2], miss[3]
  if redis.call('TYPE', key).ok == 'hash' then
    local ok, record = pcall(cjson.decode, redis.call('HGET', key, 'misfires') or '{}')
    if not ok or type(record) ~= 'table' then
      record = {}
    end
    record.skipped = (tonumber(record.skipped) or 0) + count
    -- ISO 8601 texts in UTC compare as their times do: keep the latest
    if type(record.last_skipped) ~= 'string' or record.last_skipped < skipped_at then
      record.last_skipped = skipped_at
    end
    local encoded
    ok, encoded = pcall(cjson.encode, record)
    if not ok then
      encoded = cjson.encode({skipped = record.skipped, last_skipped = record.last_skipped})
    end
    redis.call('HSET', key, 'misfires', encoded)
  end
end
return {'ok', forgotten}
