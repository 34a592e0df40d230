-- Push the lock's expiry back to the full timeout, only if this node holds it.
-- (Set, not add: celery-redbeat 2.4.2 extends the same way.)
-- KEYS[1] - lock key
-- ARGV[1] - lock token of this node
-- ARGV[2] - lock timeout, milliseconds
-- returns {'ok'} when the lock was extended, {'lost', holder|false} otherwise
local lost = lease_lost(KEYS[1], ARGV[1])
if lost then
  return lost
end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return {'ok'}
