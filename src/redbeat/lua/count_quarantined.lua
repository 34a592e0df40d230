-- Count the quarantined entries in a window of the parked members, for the metrics:
-- one reply per window, however many members it holds. Read only.
--
-- KEYS[1] - schedule sorted set (parked members have score -1)
-- ARGV[1] - offset into the parked members to start at
-- ARGV[2] - how many parked members to look at
-- returns {'ok', offset to continue at (0 once the end was reached), quarantined in the
-- window}
local count = tonumber(ARGV[2])
local members = redis.call('ZRANGEBYSCORE', KEYS[1], -1, -1, 'LIMIT', ARGV[1], count)
local quarantined = 0
for _, key in ipairs(members) do
  -- a key this user may not read (outside an ACL user's prefix) is no entry: not counted
  if redis.pcall('HEXISTS', key, 'quarantine') == 1 then
    quarantined = quarantined + 1
  end
end
if #members < count then
  return {'ok', 0, quarantined}
end
return {'ok', tonumber(ARGV[1]) + count, quarantined}
