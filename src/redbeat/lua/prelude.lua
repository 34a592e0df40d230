-- Shared by every script: store.load_script puts this text in front of each (EVAL
-- scripts cannot import one another).
--
-- Every script replies in one shape, {status, payload...}, which store.script_reply
-- decodes in one place: status is 'ok', or what the script's header names instead
-- ('lost' when the lease is another node's, with that holder or false; tick.lua's
-- 'leader', 'acquired' and 'standby'), and the payload follows as the header says.
--
-- CHUNK - arguments per variadic call (ZADD, HSET, HMGET, ...), below Lua's unpack limit
local CHUNK = 2000

-- The lease check of every script that writes under the lease: nil when this node
-- holds it, otherwise the reply {'lost', holder|false} to return as is. (With locking
-- disabled the client sends an empty token, and tick, commit and sync_statics skip the
-- check; an empty token holds no lock here.)
local function lease_lost(lock_key, token)
  local holder = redis.call('GET', lock_key)
  if holder == token then
    return nil
  end
  return {'lost', holder}
end

-- One call of `command key ...args` per CHUNK arguments.
local function flush(command, key, args)
  for first = 1, #args, CHUNK do
    redis.call(command, key, unpack(args, first, math.min(first + CHUNK - 1, #args)))
  end
end


-- A pending record read by structure: the record as a table (nil when it is not a JSON
-- object) and the held definition it names, its "definition_sha1" field (nil when it
-- names none: the older format with the definition inside, or a hand-written record).
-- The records have two writers (commit.lua's concatenation, Python's json.dumps), so a
-- pattern on their text would depend on the spacing each happens to write.
local function read_pending(text)
  local ok, record = pcall(cjson.decode, text)
  if not ok or type(record) ~= 'table' then
    return nil, nil
  end
  local sha = record.definition_sha1
  if type(sha) ~= 'string' or #sha ~= 40 or string.find(sha, '%X') then
    sha = nil
  end
  return record, sha
end
