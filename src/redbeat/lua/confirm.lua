-- Forget pending slots whose publish the broker accepted (or that were dropped: an
-- unreadable record, a slot past its misfire grace), release the held definitions they
-- named, and count the dropped late slots in their entries' misfires.
--
-- KEYS[1] - pending hash
-- KEYS[2] - held definitions hash (sha1 -> definition text, '<sha1>:refs' -> count)
-- ARGV[1] - the task ids, one JSON array (a thousand ids cost the client far more to
--           send as separate arguments than as one)
-- ARGV[2] - held slots dropped past their misfire grace, one JSON array of
--           [entry key, how many, last skipped (ISO 8601 UTC)]; optional
--
-- returns {'ok', the number of slots forgotten}
local ids = cjson.decode(ARGV[1])
local forgotten = 0
local released, named = {}, {}
for first = 1, #ids, CHUNK do
  local last = math.min(first + CHUNK - 1, #ids)
  -- a record names its definition in its definition_sha1 field (read_pending, in the
  -- prelude); one without it (the old format, with the definition inside, or a
  -- hand-written one) holds no reference
  local messages = redis.call('HMGET', KEYS[1], unpack(ids, first, last))
  for i = 1, last - first + 1 do
    local sha = messages[i] and select(2, read_pending(messages[i]))
    if sha then
      if not released[sha] then
        named[#named + 1] = sha
      end
      released[sha] = (released[sha] or 0) + 1
    end
  end
  forgotten = forgotten + redis.call('HDEL', KEYS[1], unpack(ids, first, last))
end
-- The counts read and written in a few variadic calls, not two calls per definition (a
-- burst of a thousand entries names a thousand). (HMGET and HSET, not HINCRBY: the
-- commands an ACL user of docs/deployments.md has.)
local zeroed, count_fields, counts = {}, {}, {}
for _, sha in ipairs(named) do
  count_fields[#count_fields + 1] = sha .. ':refs'
end
for first = 1, #count_fields, CHUNK do
  local last = math.min(first + CHUNK - 1, #count_fields)
  local held = redis.call('HMGET', KEYS[2], unpack(count_fields, first, last))
  for i = first, last do
    local left = (tonumber(held[i - first + 1]) or 0) - released[named[i]]
    if left <= 0 then
      zeroed[#zeroed + 1] = named[i]
    else
      counts[#counts + 1] = count_fields[i]
      counts[#counts + 1] = left
    end
  end
end
flush('HSET', KEYS[2], counts)
-- A count reaches zero with records still naming the definition when a record written
-- by hand (never counted) was released: deleting the text would make the real held slots
-- unreadable, and they would be dropped unsent. So a definition whose count ran out is
-- deleted only if no record left names it; otherwise its count is set to the records'.
-- (One scan, only when a count ran out while records remain: a broker outage's drain.)
if #zeroed > 0 and redis.call('EXISTS', KEYS[1]) == 1 then
  local naming, cursor = {}, '0'
  repeat
    local page = redis.call('HSCAN', KEYS[1], cursor, 'COUNT', 1000)
    cursor = page[1]
    for i = 2, #page[2], 2 do
      local sha = select(2, read_pending(page[2][i]))
      if sha then
        naming[sha] = (naming[sha] or 0) + 1
      end
    end
  until cursor == '0'
  for _, sha in ipairs(zeroed) do
    if naming[sha] then
      redis.call('HSET', KEYS[2], sha .. ':refs', naming[sha])
    else
      redis.call('HDEL', KEYS[2], sha, sha .. ':refs')
    end
  end
elseif redis.call('EXISTS', KEYS[1]) == 0 then
  -- No record left, so no reference: whatever a record removed by hand left counted
  -- goes, and the definitions whose count ran out with it (one call for them all).
  redis.call('DEL', KEYS[2])
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
