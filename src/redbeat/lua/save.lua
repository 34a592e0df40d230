-- Save one entry (RedBeatSchedulerEntry.save) in one round trip and one atomic step:
-- the definition and who changed it always, the policy field as given, the meta only
-- when the hash has none (a re-save keeps the run history), the quarantine cleared,
-- and the score.
--
-- KEYS[1] - the entry's hash
-- KEYS[2] - the schedule (sorted set)
-- ARGV[1] - definition text
-- ARGV[2] - meta text (the entry's own run history: written only when none is stored)
-- ARGV[3] - the score
-- ARGV[4] - the 'changed' field
-- ARGV[5] - the policy text; '' for none (a stored one is removed)
-- ARGV[6] - '1' when the score is the entry's next run after the last run in ARGV[2],
--           so it holds only where that is the stored history; '' when it holds anyway
--           (a parked entry, a score the caller set)
-- ARGV[7] - after a 'meta' reply: '=' and the stored meta the caller worked the score
--           out from (it holds while that meta is still the stored one); '' otherwise
-- ARGV[8] - the labels field: '' keeps the stored one (the caller did not name any),
--           '[]' removes it, any other text is written
--
-- The 'changed' record is also written as 'created' when the hash is new, so an entry
-- says who first wrote it (entries of earlier releases have no 'created').
--
-- A stored meta of another run history is the history the score must follow. If the
-- definition and the policy are the stored ones, unquarantined and scheduled, the stored
-- score is already that next run (the tick and every save score by the one rule,
-- nextrun.py, from the stored meta), so it is kept. Otherwise nothing is written and the
-- stored meta is returned: the rule is Python's, so the caller works the score out from
-- it and calls again with it as ARGV[7] (a write in between, a tick's, is caught).
--
-- returns {'ok'} when saved, {'meta', stored meta or false} when nothing was written
local score = ARGV[3]
if ARGV[6] == '1' then
  local stored = redis.call('HMGET', KEYS[1], 'meta', 'definition', 'policy', 'quarantine')
  local meta = stored[1]
  local expected = ARGV[7] ~= '' and string.sub(ARGV[7], 2)
  if expected and not meta then
    return {'meta', false}  -- gone since: the score follows from ARGV[2] after all
  end
  -- the same last run: the stored meta is ARGV[2] with more keys after it (a count)
  local mine = string.sub(ARGV[2], 1, -2) .. ', '
  if meta and meta ~= ARGV[2] and meta ~= expected and string.sub(meta, 1, #mine) ~= mine then
    local current = false
    if stored[2] == ARGV[1] and (stored[3] or '') == ARGV[5] and not stored[4] then
      current = redis.call('ZSCORE', KEYS[2], KEYS[1])
    end
    -- 0 (due now, no slot yet) and a score no date can hold (another client's) say
    -- nothing about the next run: not kept
    local value = current and tonumber(current)
    if not value or not (value > 0 and value < 253402300800) then
      return {'meta', meta}
    end
    score = current
  end
end
if redis.call('EXISTS', KEYS[1]) == 0 then
  redis.call('HSET', KEYS[1], 'created', ARGV[4])
end
if ARGV[8] == '[]' then
  redis.call('HDEL', KEYS[1], 'labels')
elseif ARGV[8] ~= '' then
  redis.call('HSET', KEYS[1], 'labels', ARGV[8])
end
if ARGV[5] == '' then
  redis.call('HSET', KEYS[1], 'definition', ARGV[1], 'changed', ARGV[4])
  redis.call('HDEL', KEYS[1], 'policy', 'quarantine')
else
  redis.call('HSET', KEYS[1], 'definition', ARGV[1], 'changed', ARGV[4], 'policy', ARGV[5])
  redis.call('HDEL', KEYS[1], 'quarantine')
end
redis.call('HSETNX', KEYS[1], 'meta', ARGV[2])
redis.call('ZADD', KEYS[2], score, KEYS[1])
return {'ok'}
