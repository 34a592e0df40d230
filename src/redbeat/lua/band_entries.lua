-- Read the schedule's members scoring in a band, a window of them at a time, each with
-- its definition, meta and policy, for the web view's timeline, returned as one JSON
-- text: one reply the client parses in C, not three replies a member parsed in Python
-- (the pipeline of HMGETs it replaces took half the timeline's time). Read only. A
-- hash this user may not read (outside an ACL user's prefix) is returned empty.
--
-- KEYS[1] - schedule sorted set
-- ARGV[1] - lowest score (inclusive)
-- ARGV[2] - highest score (exclusive, written "(<score>")
-- ARGV[3] - members of the band to skip
-- ARGV[4] - members to return at most
-- returns {'ok', JSON [[member, score, definition, meta, policy], ...]} (false for a
-- missing field; an empty array past the end)
local members = redis.call('ZRANGEBYSCORE', KEYS[1], ARGV[1], ARGV[2], 'WITHSCORES',
                           'LIMIT', ARGV[3], ARGV[4])
local rows = {}
for index = 1, #members, 2 do
  local fields = redis.pcall('HMGET', members[index], 'definition', 'meta', 'policy')
  if type(fields) ~= 'table' then
    fields = {false, false, false}
  end
  rows[#rows + 1] = {members[index], members[index + 1], fields[1], fields[2], fields[3]}
end
if #rows == 0 then
  return {'ok', '[]'}
end
return {'ok', cjson.encode(rows)}
