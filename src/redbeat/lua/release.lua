-- Delete the lock only if this node still holds it.
-- KEYS[1] - lock key
-- ARGV[1] - lock token of this node
-- returns {'ok'} when the lock was released, {'lost', holder|false} otherwise
local holder = redis.call('GET', KEYS[1])
if holder ~= ARGV[1] then
  return {'lost', holder}
end
redis.call('DEL', KEYS[1])
return {'ok'}
