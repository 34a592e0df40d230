-- Delete the lock only if this node still holds it.
-- KEYS[1] - lock key
-- ARGV[1] - lock token of this node
-- returns 1 if the lock was released, otherwise 0
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
