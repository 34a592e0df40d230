-- Drop parked members whose entry hash is gone. A finished entry with a time-to-live
-- (policy "ttl") is parked at -1 and its hash EXPIREs; ticks never read parked members,
-- so without this sweep every expired one-off would leave its member behind forever.
-- Unfenced on purpose: removing a member whose hash no longer exists is correct from
-- any node, and a save writes the hash and the member in one transaction.
--
-- The heartbeats are read in the same call: the leader forgets those of nodes gone
-- without closing, and a sweep is when it looks (one round trip for both).
--
-- KEYS[1] - schedule sorted set (parked members have score -1)
-- KEYS[2] - nodes sorted set (the heartbeats)
-- ARGV[1] - offset into the parked members to start at
-- ARGV[2] - how many parked members to look at
-- returns {'ok', offset to continue at (0 once the end was reached), members dropped,
--          heartbeats {node, score, ...} ({} when the key holds another type)}
local count = tonumber(ARGV[2])
local members = redis.call('ZRANGEBYSCORE', KEYS[1], -1, -1, 'LIMIT', ARGV[1], count)
local dropped, removed = 0, 0
for _, key in ipairs(members) do
  local exists = redis.pcall('EXISTS', key)
  if type(exists) == 'table' then
    -- a key this user may not even look at (outside an ACL user's prefix) is no entry
    -- of this schedule: forget the member, never touch the key (a NOPERM raised here
    -- would fail every sweep, and with it the leader's every tick)
    redis.call('ZREM', KEYS[1], key)
    removed = removed + 1
  elseif exists == 0 then
    redis.call('ZREM', KEYS[1], key)
    dropped = dropped + 1
    removed = removed + 1
  end
end
local beats = redis.pcall('ZRANGE', KEYS[2], 0, -1, 'WITHSCORES')
if beats.err then
  beats = {}  -- the hash of earlier builds: tick.lua replaces it at its heartbeat
end
if #members < count then
  return {'ok', 0, dropped, beats}
end
return {'ok', tonumber(ARGV[1]) + #members - removed, dropped, beats}
