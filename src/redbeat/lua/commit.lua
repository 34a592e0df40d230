-- Apply one tick's decisions, only while this node still holds the lock.
-- Each operation names the fingerprint (sha1 of definition, newline, meta) of the
-- entry it was computed from; an entry edited or deleted since tick.lua read it is
-- left alone and is read again by the next tick.
--
-- KEYS[1] - schedule sorted set
-- KEYS[2] - lock key
-- KEYS[3] - pending hash
-- ARGV[1] - lock token of this node; '' when locking is disabled
-- ARGV[2] - lock timeout, milliseconds
-- ARGV[3..] - operations, each:
--   kind, key, fingerprint, score, expire_seconds, N, N field/value pairs,
--   P, P task_id/message pairs
--
-- Operation kinds:
--   'update'     if unchanged: write the fields (new meta, history, misfires), record
--                the pending slots (messages kept until their publish is confirmed),
--                clear an earlier quarantine, set the score, and EXPIRE the hash when
--                expire_seconds > 0 (a finished entry with a time-to-live)
--   'quarantine' if unchanged, or if the hash has no definition to fingerprint: write
--                the fields (the reason) and set the score (the parked -1)
--   'drop'       the hash is gone (or the key is not a hash): remove the member; if a
--                hash exists after all, write the fields (the reason) and the score
--
-- returns {'ok', applied} or {'lost', holder|false}
local token = ARGV[1]
if token ~= '' then
  local holder = redis.call('GET', KEYS[2])
  if holder ~= token then
    return {'lost', holder}
  end
  redis.call('PEXPIRE', KEYS[2], ARGV[2])
end

-- Scores and pending slots are collected and written with one ZADD and one HSET (in
-- chunks, to stay below Lua's unpack limit): per-entry calls are most of this script's
-- cost when a thousand entries are due at once.
local scores, pending = {}, {}
local function flush(command, key, args)
  for first = 1, #args, 2000 do
    redis.call(command, key, unpack(args, first, math.min(first + 1999, #args)))
  end
end
local function write_fields(key, first, count)
  if count > 0 then
    redis.call('HSET', key, unpack(ARGV, first, first + 2 * count - 1))
  end
end

local applied = 0
local i = 3
while i <= #ARGV do
  local kind, key, fingerprint, score = ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3]
  local expire = tonumber(ARGV[i + 4])
  local field_count = tonumber(ARGV[i + 5])
  local fields_at = i + 6
  local pending_count = tonumber(ARGV[fields_at + 2 * field_count])
  local pending_at = fields_at + 2 * field_count + 1
  i = pending_at + 2 * pending_count

  if kind == 'drop' then
    if redis.call('TYPE', key).ok ~= 'hash' then
      redis.call('ZREM', KEYS[1], key)
    else
      write_fields(key, fields_at, field_count)
      scores[#scores + 1] = score
      scores[#scores + 1] = key
    end
    applied = applied + 1
  else
    local current = redis.call('HMGET', key, 'definition', 'meta', 'quarantine')
    local unchanged = current[1] and
      redis.sha1hex(current[1] .. '\n' .. (current[2] or '')) == fingerprint
    if unchanged or (kind == 'quarantine' and not current[1]) then
      write_fields(key, fields_at, field_count)
      if kind == 'update' then
        for p = pending_at, pending_at + 2 * pending_count - 1 do
          pending[#pending + 1] = ARGV[p]
        end
        if current[3] then
          redis.call('HDEL', key, 'quarantine')
        end
        if expire > 0 then
          redis.call('EXPIRE', key, expire)
        end
      end
      scores[#scores + 1] = score
      scores[#scores + 1] = key
      applied = applied + 1
    end
  end
end
flush('ZADD', KEYS[1], scores)
flush('HSET', KEYS[3], pending)
return {'ok', applied}
