-- The first parked members and their quarantine reasons, for `redbeat status`: a fixed
-- number of commands from the client whatever the number of parked entries (a second
-- pipeline of one HGET per sampled member made the cost depend on whether any exist).
--
-- KEYS[1] - schedule sorted set (parked members have score -1)
-- ARGV[1] - how many parked members to sample
-- returns {'ok', member, its quarantine field (false: none, or a key this user may not
-- read, such as a member outside an ACL user's prefix), ...}
local members = redis.call('ZRANGEBYSCORE', KEYS[1], -1, -1, 'LIMIT', 0, tonumber(ARGV[1]))
local sample = {'ok'}
for _, key in ipairs(members) do
  local reason = redis.pcall('HGET', key, 'quarantine')
  if type(reason) == 'table' then
    reason = false
  end
  sample[#sample + 1] = key
  sample[#sample + 1] = reason
end
return sample
