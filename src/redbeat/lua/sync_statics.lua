-- Write the beat_schedule (static) entries and delete the statics no longer configured,
-- deciding on the server what the stored data allows, so that a start-up or a new
-- leader whose statics are already stored costs one call and writes nothing. Fenced by
-- the lock when a token is given (a new leader); unfenced at start-up, where every node
-- writes its own beat_schedule (as 2.4.2 did).
--
-- KEYS[1] - schedule sorted set
-- KEYS[2] - lock key
-- KEYS[3] - statics set (entry names)
-- ARGV[1] - lock token ('' when not fenced)
-- ARGV[2] - the statics, one JSON array of
--           [key, name, definition JSON, policy JSON, labels JSON, score, basis];
--           an empty policy removes the field (the static no longer sets one); labels
--           as save.lua takes them ('' keeps the stored ones, '[]' removes them);
--           score: a decimal string, or null for none; basis: what the score was worked
--           out from by the one rule (nextrun.py, Python's), so where it holds:
--           null: a static seen the first time (counts as having run now), so no meta
--           and no score stored; false: no meta stored; a text: that meta stored
-- ARGV[3] - the 'changed' field of what is written (also 'created' of a new hash)
-- ARGV[4] - the meta of a static seen the first time (written only when none is stored)
-- ARGV[5] - the statics to remove, one JSON array of [key, name]
-- ARGV[6] - '1' when ARGV[2] is the whole beat_schedule: the recorded statics not in it
--           are named in the reply (their keys are the entry class's to give)
--
-- A static whose definition and policy are the stored ones, unquarantined and
-- scheduled, with a run history, keeps its score: the tick scored it by the same rule
-- from that history. It is not rewritten at all when its labels are unchanged too
-- ('changed' says when the definition last changed). One whose score the stored data
-- decides otherwise (an edited static that has run, a hash written by hand) and that
-- came without a score that holds is named in the reply with what is stored, for the
-- client to work the score out and call again (a tick's write in between is caught by
-- the basis).
--
-- returns {'ok', JSON text [[[index, meta|false, score|false], ...], [name, ...]]}
-- (the statics asked about, 1-based in ARGV[2], and the recorded names not configured),
-- or {'lost', holder|false} when another node holds the lock
local lost = ARGV[1] ~= '' and lease_lost(KEYS[2], ARGV[1])
if lost then
  return lost
end

-- Whether a score worked out from ``basis`` holds for what is stored.
local function holds(basis, meta, current)
  if basis == cjson.null then
    local value = current and tonumber(current)
    return not meta and not (value and value > 0)
  end
  return (meta or false) == basis
end

-- Whether the stored score is the one the rule gives from the stored history.
local function keeps_score(stored, static, current)
  local value = current and tonumber(current)
  -- 0 (due now, no slot yet) and a score no date can hold say nothing of the next run
  return stored[2] and not stored[5] and stored[1] == static[3]
    and (stored[3] or '') == static[4] and value and value > 0 and value < 253402300800
end

local function unchanged_labels(given, stored)
  return given == '' or given == stored or (given == '[]' and not stored)
end

local function write(static, key)
  if redis.call('EXISTS', key) == 0 then
    redis.call('HSET', key, 'created', ARGV[3])
  end
  redis.call('HSET', key, 'definition', static[3], 'changed', ARGV[3])
  redis.call('HSETNX', key, 'meta', ARGV[4])
  if static[4] ~= '' then
    redis.call('HSET', key, 'policy', static[4])
  else
    redis.call('HDEL', key, 'policy')
  end
  if static[5] == '[]' then
    redis.call('HDEL', key, 'labels')
  elseif static[5] ~= '' then
    redis.call('HSET', key, 'labels', static[5])
  end
  redis.call('HDEL', key, 'quarantine')
end

-- Scores and names are collected and added with one ZADD and one SADD per chunk (below
-- Lua's unpack limit).
local scores, names, asked, configured = {}, {}, {}, {}
for i, static in ipairs(cjson.decode(ARGV[2])) do
  local key = static[1]
  configured[static[2]] = true
  local stored = redis.pcall('HMGET', key, 'definition', 'meta', 'policy', 'labels', 'quarantine')
  if stored.err then
    redis.call('DEL', key)  -- not a hash: the configured entry replaces whatever it held
    stored = {}
  end
  local meta = stored[2]
  local current = redis.call('ZSCORE', KEYS[1], key)
  local score = static[6] ~= cjson.null and holds(static[7], meta, current) and static[6]
  local kept = not score and keeps_score(stored, static, current)
  if kept and unchanged_labels(static[5], stored[4]) then
    names[#names + 1] = static[2]  -- as stored: nothing to write
  elseif score or kept then
    write(static, key)
    scores[#scores + 1] = score or current
    scores[#scores + 1] = key
    names[#names + 1] = static[2]
  else
    asked[#asked + 1] = {i, meta or false, current or false}
  end
end
flush('ZADD', KEYS[1], scores)
flush('SADD', KEYS[3], names)
for _, removed in ipairs(cjson.decode(ARGV[5])) do
  redis.call('DEL', removed[1])
  redis.call('ZREM', KEYS[1], removed[1])
  redis.call('SREM', KEYS[3], removed[2])
end
local unrecorded = {}
if ARGV[6] == '1' then
  for _, name in ipairs(redis.call('SMEMBERS', KEYS[3])) do
    if not configured[name] then
      unrecorded[#unrecorded + 1] = name
    end
  end
end
-- cjson writes an empty table as {}: the client reads that as an empty list
return {'ok', cjson.encode({asked, unrecorded})}
