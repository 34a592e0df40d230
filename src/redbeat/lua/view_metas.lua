-- Read one field (the meta for the web view's last-run order, the labels for a change
-- by label) of a window of the schedule's members, returned as one JSON text: a window
-- of 2,000 members is one reply the client parses in C, not 2,000 replies parsed one by
-- one in Python (ten times slower). Read only. A member whose hash this user may not
-- read (outside an ACL user's prefix) is returned with an empty field, as one that has
-- none.
--
-- KEYS[1] - schedule sorted set
-- ARGV[1] - first rank of the window
-- ARGV[2] - last rank of the window (inclusive)
-- ARGV[3] - the hash field to read ('meta' when absent)
-- returns {'ok', JSON [[member, field or ""], ...]} (an empty array past the end)
local field = ARGV[3] or 'meta'
local members = redis.call('ZRANGE', KEYS[1], ARGV[1], ARGV[2])
local rows = {}
for index, key in ipairs(members) do
  local value = redis.pcall('HGET', key, field)
  if type(value) ~= 'string' then
    value = ''
  end
  rows[index] = {key, value}
end
if #rows == 0 then
  return {'ok', '[]'}
end
return {'ok', cjson.encode(rows)}
