-- Hold one slot outside a tick (run-now): its pending record and one more reference to
-- the definition it names, in one atomic step, exactly as commit.lua holds the slots it
-- claims, so confirm.lua releases the definition when the record is confirmed.
--
-- KEYS[1] - pending hash
-- KEYS[2] - held definitions hash (sha1 -> definition text, '<sha1>:refs' -> count)
-- ARGV[1] - task id
-- ARGV[2] - the pending message (names the definition by ARGV[3])
-- ARGV[3] - sha1 of the definition text
-- ARGV[4] - the definition text
--
-- returns {'ok'} when the slot is now held, {'pending'} when that task id was already
-- pending (left as it was: it is the same slot)
if redis.call('HSETNX', KEYS[1], ARGV[1], ARGV[2]) == 0 then
  return {'pending'}
end
redis.call('HSETNX', KEYS[2], ARGV[3], ARGV[4])
-- HGET and HSET, not HINCRBY: the commands an ACL user of docs/deployments.md has
local held = tonumber(redis.call('HGET', KEYS[2], ARGV[3] .. ':refs')) or 0
redis.call('HSET', KEYS[2], ARGV[3] .. ':refs', held + 1)
return {'ok'}
