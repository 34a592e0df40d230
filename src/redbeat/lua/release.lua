-- Delete the lock only if this node still holds it.
-- KEYS[1] - lock key
-- ARGV[1] - lock token of this node
-- returns {'ok'} when the lock was released, {'lost', holder|false} otherwise
local lost = lease_lost(KEYS[1], ARGV[1])
if lost then
  return lost
end
redis.call('DEL', KEYS[1])
return {'ok'}
