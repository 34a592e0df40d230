-- Find the members of a window of an ordered set whose entry name contains a text, for
-- the web view's name search: the window is read and matched inside Redis, so a search
-- through 100,000 names returns only the matches instead of every name to the client
-- (where parsing them cost a hundred times more). Read only. Case-insensitive for
-- ASCII letters (string.lower).
--
-- KEYS[1] - a sorted set of entry keys (the schedule, or one of the web view's orders)
-- ARGV[1] - first rank of the window
-- ARGV[2] - last rank of the window (inclusive)
-- ARGV[3] - the text to find, lower case
-- ARGV[4] - the key prefix (names are keys without it; other members never match)
-- returns {'ok', rank, member, ...}: the matches, in rank order
local first = tonumber(ARGV[1])
local prefix = ARGV[4]
local members = redis.call('ZRANGE', KEYS[1], ARGV[1], ARGV[2])
local found = {'ok'}
for index, key in ipairs(members) do
  if string.sub(key, 1, #prefix) == prefix and
      string.find(string.lower(string.sub(key, #prefix + 1)), ARGV[3], 1, true) then
    found[#found + 1] = first + index - 1
    found[#found + 1] = key
  end
end
return found
