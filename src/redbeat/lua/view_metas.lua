-- Read the meta of a window of the schedule's members for the web view's last-run
-- order, returned as one JSON text: a window of 2,000 members is one reply the client
-- parses in C, not 2,000 replies parsed one by one in Python (ten times slower).
-- Read only. A member whose hash this user may not read (outside an ACL user's
-- prefix) is returned with an empty meta, as one that has none.
--
-- KEYS[1] - schedule sorted set
-- ARGV[1] - first rank of the window
-- ARGV[2] - last rank of the window (inclusive)
-- returns {'ok', JSON [[member, meta or ""], ...]} (an empty array past the end)
local members = redis.call('ZRANGE', KEYS[1], ARGV[1], ARGV[2])
local rows = {}
for index, key in ipairs(members) do
  local meta = redis.pcall('HGET', key, 'meta')
  if type(meta) ~= 'string' then
    meta = ''
  end
  rows[index] = {key, meta}
end
if #rows == 0 then
  return {'ok', '[]'}
end
return {'ok', cjson.encode(rows)}
