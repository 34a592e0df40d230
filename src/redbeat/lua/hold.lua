-- Hold one slot outside a tick (run-now): its pending record, its task id in the index
-- and one more reference to the definition it names, in one atomic step, exactly as
-- commit.lua holds the slots it claims, so confirm.lua releases the definition when the
-- record is confirmed.
--
-- KEYS[1] - pending index (task id scored by due time; each record at
--           <KEYS[1]>:<task id>, see the prelude)
-- KEYS[2] - held definitions index (sha1 -> how many records name it; each text at
--           <KEYS[2]>:<sha1>)
-- ARGV[1] - task id
-- ARGV[2] - the pending message (names the definition by ARGV[3]; its "due" is the
--           index score)
-- ARGV[3] - sha1 of the definition text
-- ARGV[4] - the definition text
--
-- returns {'ok'} when the slot is now held, {'pending'} when that task id was already
-- pending (left as it was: it is the same slot)
adopt_held_shapes(KEYS[1], KEYS[2])
if not redis.call('SET', record_key(KEYS[1], ARGV[1]), ARGV[2], 'NX') then
  return {'pending'}
end
redis.call('ZADD', KEYS[1], due_of((read_pending(ARGV[2]))), ARGV[1])
redis.call('SET', text_key(KEYS[2], ARGV[3]), ARGV[4], 'NX')
-- ZADD INCR, not ZINCRBY: the commands an ACL user of docs/deployments.md has
redis.call('ZADD', KEYS[2], 'INCR', 1, ARGV[3])
return {'ok'}
