-- Take or keep leadership, then read one bounded batch of due entries.
-- The lock check and the reads happen in one atomic step, so a node that reads a
-- batch was the leader at that instant; its writes are fenced again by commit.lua.
--
-- KEYS[1] - schedule sorted set (member = entry key, score = next due epoch seconds)
-- KEYS[2] - lock key
-- KEYS[3] - pending index (task ids of claimed slots not yet confirmed as published,
--           scored by due time; each record at <KEYS[3]>:<task id>, see the prelude)
-- ARGV[1] - now, epoch seconds
-- ARGV[2] - batch size: at most this many due entries (and pending slots) per call
-- ARGV[3] - lock token of this node; '' when locking is disabled
-- ARGV[4] - lock timeout, milliseconds
-- KEYS[4] - nodes sorted set (member = node id, score = epoch seconds of its last tick,
--           negated for a standby), the heartbeat that `redbeat check`/`status` read;
--           not a hash, so code listing the prefix's hashes as entries (as code
--           written for 2.4.2 does) meets only entries; the hash of earlier builds is
--           replaced at the first heartbeat
-- ARGV[5] - this node's id in the nodes sorted set
-- KEYS[5] - held definitions index (sha1 -> how many records name it; each text at
--           <KEYS[5]>:<sha1>)
-- KEYS[6] - paused flag (a string present while an operator pauses the schedule)
-- ARGV[6] - '1' to read Redis's clock (TIME) for the node's fleet clock, '' not to: a
--           node asks only when its offset may have changed (fleet_clock.py)
-- ARGV[7] - '1' to read the evicted-keys count (INFO stats: the node found an allkeys-*
--           policy, under which an eviction can take the schedule), '' not to
--
-- returns {'standby', now, refused, holder|false, pttl} when another node holds the lock
--           (holder false: nobody does, and Redis refused this node's SET);
--         {'acquired', now, refused} when this call just took the lock (nothing read yet);
--         {'leader', now, refused, evicted, replicas, next_score|false, pending, rows,
--           held, policies} otherwise, and
--         {'leader', now, refused, evicted, replicas, false, {}, '[]', {}, {}} while the
--           schedule is paused: the lock is kept and the heartbeat written, nothing is
--           read, so nothing is sent (due slots wait; held ones are re-sent once resumed);
--           now being Redis's clock (TIME) as "<seconds>.<microseconds>": each node
--           measures its own clock's skew from it, in the round trip it makes anyway;
--           refused: false, or the error Redis answered the heartbeat's write with (OOM);
--           evicted: INFO's evicted_keys (a decimal string; false without INFO),
--           replicas: how many replicas INFO lists online (likewise), where
--           pending = {task_id, message, ...} (at most batch size of them, the oldest
--           due first; message '' for a record that is missing),
--           held = {sha1, definition, ...}, each definition those records name, once,
--           policies = {key, policy|false, ...}, the policy field of each entry those
--           records are slots of (the misfire grace a re-send must honour), and
--           rows = one JSON text: [[key, score, definition|null, meta|null,
--                  policy|null, misfires|null(, run)], ...], the score a decimal
--                  string; run (the entry's latest run, '' for none) only for an entry
--                  whose policy names "overlap" or "relative_to" (its row is "watched")
--                  (cjson would round a number to 14 digits)
--           (one bulk string parses far faster in the client than thousands of
--           array elements; bytes that are not UTF-8 pass through cjson unchanged)
-- (false when not asked for, or when an ACL refuses TIME: the node keeps its own clock)
local now = false
if ARGV[6] == '1' then
  local clock = redis.pcall('TIME')
  if clock[1] then
    now = clock[1] .. '.' .. string.format('%06d', tonumber(clock[2]))
  end
end

-- The heartbeat, or why Redis refused it: a Redis out of memory under noeviction
-- refuses every write but answers reads, PEXPIRE and DEL, so a standby keeps standing
-- by (and a leader keeps its lease) instead of failing the whole tick.
-- Any other error fails the script as redis.call would.
local function refused(reply)
  if type(reply) == 'table' and reply.err then
    if string.sub(reply.err, 1, 3) == 'OOM' then
      return reply.err
    end
    error(reply)
  end
  return false
end

local function beat(role)
  local stamp = role == 'leader' and ARGV[1] or ('-' .. ARGV[1])
  local reply = redis.pcall('ZADD', KEYS[4], stamp, ARGV[5])
  if type(reply) == 'table' and reply.err and string.find(reply.err, 'WRONGTYPE', 1, true)
      and redis.call('TYPE', KEYS[4]).ok == 'hash' then
    redis.call('DEL', KEYS[4])  -- heartbeats only: each node writes its own again
    reply = redis.pcall('ZADD', KEYS[4], stamp, ARGV[5])
  end
  return refused(reply)
end

local token = ARGV[3]
if token ~= '' then
  local holder = redis.call('GET', KEYS[2])
  if not holder then
    local oom = refused(redis.pcall('SET', KEYS[2], token, 'PX', ARGV[4]))
    if oom then
      return {'standby', now, oom, false, -2}  -- nobody leads: taken when it can be
    end
    return {'acquired', now, beat('leader')}
  elseif holder ~= token then
    local oom = beat('standby')
    return {'standby', now, oom, holder, redis.call('PTTL', KEYS[2])}
  end
  redis.call('PEXPIRE', KEYS[2], ARGV[4])
end
local oom = beat('leader')
-- this master's replicas, read on every leading tick: while it has some, the client
-- waits for them to acknowledge the tick and the commit before it sends anything, and a
-- replica attached since the last tick must be waited for from the next commit on
-- (replication.py; online ones: a replica still syncing acknowledges nothing until it
-- is done). With ARGV[7], the keys Redis evicted since it started too, so the leader
-- tells an eviction of the schedule from one tick to the next: one INFO for both
-- sections (Redis 7 takes several; an older one refuses that, and is asked each apart).
-- (false where the server's Lua has no INFO: fakeredis)
local info
if ARGV[7] == '1' then
  info = redis.pcall('INFO', 'stats', 'replication')
  if type(info) ~= 'string' then
    local stats, replication = redis.pcall('INFO', 'stats'), redis.pcall('INFO', 'replication')
    info = type(stats) == 'string' and type(replication) == 'string' and stats .. replication
  end
else
  info = redis.pcall('INFO', 'replication')
end
info = type(info) == 'string' and info
local evicted = info and string.match(info, 'evicted_keys:(%d+)') or false
local replicas = false
if info then
  replicas = 0
  for _ in string.gmatch(info, 'state=online') do
    replicas = replicas + 1
  end
end
-- Whether the schedule is paused and whether slots are held, in one call: on most
-- ticks neither key exists; otherwise each is asked apart. TYPE, not EXISTS, for the
-- held slots: it finds the hashes of earlier releases (prelude: adopt_held_shapes).
local paused, pending_type = false, 'none'
if redis.call('EXISTS', KEYS[3], KEYS[6] or KEYS[3]) > 0 then
  paused = KEYS[6] and redis.call('EXISTS', KEYS[6]) == 1
  pending_type = redis.call('TYPE', KEYS[3]).ok
end
if paused then
  return {'leader', now, oom, evicted, replicas, false, {}, '[]', {}, {}}
end

-- The earliest scheduled member first: on an idle tick it is not due, and it is the
-- next score (one read instead of the due read and the next-score read).
local first = redis.call('ZRANGEBYSCORE', KEYS[1], 0, '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
local idle = #first == 0 or tonumber(first[2]) > tonumber(ARGV[1])
local due = {}
if not idle then
  due = redis.call('ZRANGEBYSCORE', KEYS[1], 0, ARGV[1], 'WITHSCORES', 'LIMIT', 0, ARGV[2])
end
local rows = {}
for i = 1, #due, 2 do
  local key = due[i]
  local fields = redis.pcall('HMGET', key, 'definition', 'meta', 'policy', 'misfires')
  if fields.err then
    fields = {}  -- not a hash: commit.lua drops it
  end
  local row = {key, due[i + 1], fields[1] or cjson.null,
               fields[2] or cjson.null, fields[3] or cjson.null, fields[4] or cjson.null}
  local policy = fields[3]
  if policy and (string.find(policy, '"overlap"', 1, true) or
                 string.find(policy, '"relative_to"', 1, true)) then
    row[7] = redis.call('HGET', key, 'run') or ''  -- a policy that waits for runs
  end
  rows[#rows + 1] = row
end

local pending, held, policies = {}, {}, {}
if pending_type == 'hash' then
  pending_type = adopt_held_shapes(KEYS[3], KEYS[5]) and 'zset' or 'none'
end
if pending_type ~= 'none' then
  -- the oldest due first: a backlog larger than a batch goes in due order
  local ids = redis.call('ZRANGE', KEYS[3], 0, tonumber(ARGV[2]) - 1)
  local shas, keys = {}, {}
  for _, task_id in ipairs(ids) do
    -- whatever a record holds must not fail the tick: a record that cannot be read
    -- (or is missing) is returned as is, and the client drops it
    local text = redis.call('GET', record_key(KEYS[3], task_id)) or ''
    pending[#pending + 1] = task_id
    pending[#pending + 1] = text
    local message, sha = read_pending(text)
    if sha and not shas[sha] then
      shas[sha] = true
      local definition = redis.call('GET', text_key(KEYS[5], sha))
      if definition then
        held[#held + 1] = sha
        held[#held + 1] = definition
      end
    end
    local key = message and message.key
    if type(key) == 'string' and not keys[key] then
      keys[key] = true
      local policy = redis.pcall('HGET', key, 'policy')
      policies[#policies + 1] = key
      policies[#policies + 1] = type(policy) == 'string' and policy or false
    end
  end
end

local upcoming = first
if not idle then
  upcoming = redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. ARGV[1], '+inf', 'WITHSCORES',
                        'LIMIT', 0, 1)
end
local next_score = false
if #upcoming > 0 then
  next_score = upcoming[2]
end
-- cjson writes an empty table as {}: the client reads that as no rows
return {'leader', now, oom, evicted, replicas, next_score, pending, cjson.encode(rows), held, policies}
