-- Push the lock's expiry back to the full timeout, only if this node holds it.
-- (Set, not add: celery-redbeat 2.4.2 extends the same way.)
-- KEYS[1] - lock key
-- ARGV[1] - lock token of this node
-- ARGV[2] - lock timeout, milliseconds
-- returns 1 if the lock was extended, otherwise 0
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
