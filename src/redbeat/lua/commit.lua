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
-- ARGV[3..] - operations, 8 arguments each:
--   kind, key, fingerprint, score, value, aux1, aux2, aux3
--
-- Operation kinds:
--   'claim'      meta := value; history := aux1 ('' keeps it); when aux2 is not '',
--                pending[aux2] := aux3 (the message, until its publish is confirmed)
--   'score'      set the score only (not due yet, disabled, finished)
--   'quarantine' quarantine := value (the reason); score is the parked -1
--   'drop'       the hash is gone (or the key is not a hash): remove the member; if a
--                hash exists after all (without a definition), quarantine it with
--                reason = value
-- Every kind but 'drop' also sets the score and, except 'quarantine', clears any
-- earlier quarantine reason.
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

local applied = 0
for i = 3, #ARGV, 8 do
  local kind, key, fingerprint, score = ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3]
  local value, aux1, aux2, aux3 = ARGV[i + 4], ARGV[i + 5], ARGV[i + 6], ARGV[i + 7]
  if kind == 'drop' then
    if redis.call('TYPE', key).ok ~= 'hash' then
      redis.call('ZREM', KEYS[1], key)
    else
      redis.call('HSET', key, 'quarantine', value)
      scores[#scores + 1] = score
      scores[#scores + 1] = key
    end
    applied = applied + 1
  else
    local current = redis.call('HMGET', key, 'definition', 'meta', 'quarantine')
    local unchanged = current[1] and
      redis.sha1hex(current[1] .. '\n' .. (current[2] or '')) == fingerprint
    if unchanged or (not current[1] and kind == 'quarantine') then
      -- (a hash without a definition cannot be fingerprinted: park it with its reason)
      if kind == 'quarantine' then
        redis.call('HSET', key, 'quarantine', value)
      else
        if kind == 'claim' then
          if aux1 ~= '' then
            redis.call('HSET', key, 'meta', value, 'history', aux1)
          else
            redis.call('HSET', key, 'meta', value)
          end
          if aux2 ~= '' then
            pending[#pending + 1] = aux2
            pending[#pending + 1] = aux3
          end
        end
        if current[3] then
          redis.call('HDEL', key, 'quarantine')
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
