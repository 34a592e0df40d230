-- Forget pending slots whose publish the broker accepted.
-- KEYS[1] - pending hash
-- ARGV[1] - the task ids, one JSON array (a thousand ids cost the client far more to
--           send as separate arguments than as one)
-- returns the number of slots forgotten
local ids = cjson.decode(ARGV[1])
local forgotten = 0
for first = 1, #ids, 2000 do
  forgotten = forgotten + redis.call('HDEL', KEYS[1], unpack(ids, first, math.min(first + 1999, #ids)))
end
return forgotten
