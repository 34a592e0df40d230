-- Apply one tick's decisions, only while this node still holds the lock.
-- Each operation names the fingerprint (the sha1 of the definition, then the sha1 of the
-- meta: 80 hex digits) of the entry it was computed from; an entry edited or deleted
-- since tick.lua read it is left alone and is read again by the next tick. For an entry
-- whose policy waits for its runs the sha1 of its 'run' field follows (120 hex digits):
-- a worker's report since the read leaves it alone too. (The definition's own sha1 is
-- also the name of its held copy: one digest of it checks the entry and names the copy.)
--
-- KEYS[1] - schedule sorted set
-- KEYS[2] - lock key
-- KEYS[3] - pending index (task id scored by due time; each record at
--           <KEYS[3]>:<task id>, see the prelude)
-- KEYS[4] - held definitions index (sha1 of a definition -> how many pending records
--           name it; each text at <KEYS[4]>:<sha1>)
-- KEYS[5] - history stream: one dispatch record per claimed slot (key, task_id,
--           due_ms, node; the record's id is the claim time), trimmed to about ARGV[6]
--           records in all
-- ARGV[1] - lock token of this node; '' when locking is disabled
-- ARGV[2] - lock timeout, milliseconds
-- ARGV[3] - claimed at, epoch seconds, and ARGV[4] - this node's name: both go into
--           the pending messages
-- ARGV[5] - the operations, one JSON array (cjson decodes it in C; thousands of
--           separate arguments cost the client more to send than the script to run):
--   [[kind, key, fingerprint, score, expire_seconds, [field, value, ...],
--     [task_id, due, ...], [task_id, due_ms, ...]], ...]
--   score and due are decimal strings, so no digit is lost to Lua's number formatting
-- ARGV[6] - records the history stream keeps (0: none written), ARGV[7] - this node's
--           name in them (<host>:<pid>)
--
-- Operation kinds:
--   'update'     if unchanged: write the fields (new meta, misfires), append a dispatch
--                record per claimed slot to the history stream, delete the ring of
--                'history:<i>' fields an older release kept in the hash (when it has
--                'history:0'), record the slots as pending (each message names, by its
--                sha1, the definition the slot was claimed from; the text itself is kept once in
--                the held definitions, counted per record, until the last record
--                naming it is confirmed), clear an earlier quarantine, set the score, and
--                EXPIRE the hash when expire_seconds > 0 (a finished entry with a
--                time-to-live). A slot whose task id is already pending keeps its first
--                record: it is the same slot, already held as claimed
--   'quarantine' if unchanged, or if the hash has no definition to fingerprint: write
--                the fields (the reason) and set the score (the parked -1)
--   'drop'       the member names no hash (the key is gone or holds another type):
--                remove the member; a hash created since the read is left alone (the
--                next tick reads it)
--   'forget'     the member is not a key of this schedule's entries (outside the prefix,
--                or an internal key): remove the member without touching the key
--
-- returns {'ok', applied, skipped, history} or {'lost', holder|false}, where skipped lists
-- the keys of the 'update' operations not applied (their entry changed since the read):
-- their claims must not be published; history is '' when no record was due, 'ok' when
-- they were written, else the error Redis gave for the first one (nothing more tried)
local token = ARGV[1]
if token ~= '' then
  local lost = lease_lost(KEYS[2], token)
  if lost then
    return lost
  end
  redis.call('PEXPIRE', KEYS[2], ARGV[2])
end
local message_tail = ', "claimed_at": ' .. ARGV[3] .. ', "node": ' .. cjson.encode(ARGV[4]) ..
  ', "reason": "scheduled"}'

-- Scores are collected and written with one ZADD (in chunks, to stay below Lua's unpack
-- limit), and so are the held slots' index scores: per-entry calls are most of this
-- script's cost when a thousand entries are due at once.
local scores = {}
-- the slots to hold: task ids, their messages, the sha1 of the definition each names
local ids, messages, shas, dues, texts = {}, {}, {}, {}, {}

local function write_fields(key, fields)
  if #fields > 0 then
    redis.call('HSET', key, unpack(fields))
  end
end

-- History is advisory: a record that cannot be written (the key holds another type, an
-- ACL user without XADD) stops the recording for this commit, never the commit itself.
local history_length = tonumber(ARGV[6])
local recording, recorded, history_error = history_length > 0, false, nil
local function record_dispatches(key, records)
  for r = 1, #records, 2 do
    if not recording then
      return
    end
    local reply = redis.pcall('XADD', KEYS[5], '*', 'key', key, 'task_id', records[r],
                              'due_ms', records[r + 1], 'node', ARGV[7])
    if type(reply) == 'table' and reply.err then
      recording, history_error = false, reply.err
    else
      recorded = true
    end
  end
end

-- An older release's ring of dispatch records in the hash: every 'history:<i>' field.
-- (HGETALL, not HKEYS: a command the ACL user of docs/deployments.md has; once an entry.)
local function drop_legacy_history(key)
  local old, all = {}, redis.call('HGETALL', key)
  for i = 1, #all, 2 do
    if string.sub(all[i], 1, 8) == 'history:' then
      old[#old + 1] = all[i]
    end
  end
  flush('HDEL', key, old)
end

local applied, skipped = 0, {}
for _, op in ipairs(cjson.decode(ARGV[5])) do
  local kind, key, fingerprint, score, expire, fields, slots, records =
    op[1], op[2], op[3], op[4], op[5], op[6], op[7], op[8]

  if kind == 'forget' then
    redis.call('ZREM', KEYS[1], key)
    applied = applied + 1
  elseif kind == 'drop' then
    if redis.call('TYPE', key).ok ~= 'hash' then
      redis.call('ZREM', KEYS[1], key)
      applied = applied + 1
    end
  else
    local current = redis.call('HMGET', key, 'definition', 'meta', 'quarantine', 'history:0',
                               'run')
    local sha = current[1] and sha1hex(current[1])
    local unchanged = sha == string.sub(fingerprint, 1, 40)
      and sha1hex(current[2] or '') == string.sub(fingerprint, 41, 80)
      and (#fingerprint == 80 or sha1hex(current[5] or '') == string.sub(fingerprint, 81))
    if unchanged or (kind == 'quarantine' and not current[1]) then
      write_fields(key, fields)
      if kind == 'update' then
        if #slots > 0 then
          texts[sha] = current[1]
          local message_head = '{"key": ' .. cjson.encode(key) .. ', "definition_sha1": "' ..
            sha .. '", "due": '
          for s = 1, #slots, 2 do
            ids[#ids + 1] = slots[s]
            messages[#messages + 1] = message_head .. slots[s + 1] .. message_tail
            shas[#shas + 1] = sha
            dues[#dues + 1] = slots[s + 1]
          end
        end
        record_dispatches(key, records)
        if current[3] then
          redis.call('HDEL', key, 'quarantine')
        end
        if current[4] then
          drop_legacy_history(key)
        end
        if expire > 0 then
          redis.call('EXPIRE', key, expire)
        end
      end
      scores[#scores + 1] = score
      scores[#scores + 1] = key
      applied = applied + 1
    elseif kind == 'update' then
      skipped[#skipped + 1] = key
    end
  end
end
flush('ZADD', KEYS[1], scores)
if recorded then
  redis.pcall('XTRIM', KEYS[5], 'MAXLEN', '~', history_length)
end

-- Hold each new slot: its record (SET NX: a task id already pending keeps its first
-- record), its task id in the index scored by due time, and one more reference to its
-- definition (stored once per distinct text, whatever the number of slots naming it).
if #ids > 0 then
  adopt_held_shapes(KEYS[3], KEYS[4])
end
local index, refs, named = {}, {}, {}
for i = 1, #ids do
  if redis.call('SET', record_key(KEYS[3], ids[i]), messages[i], 'NX') then
    index[#index + 1] = dues[i]
    index[#index + 1] = ids[i]
    if not refs[shas[i]] then
      named[#named + 1] = shas[i]
    end
    refs[shas[i]] = (refs[shas[i]] or 0) + 1
  end
end
flush('ZADD', KEYS[3], index)
-- One text per definition (SET NX: a sha1 names one text, so one already there is the
-- same), and its count raised by the records just written: in one variadic ZADD when
-- nothing else is held (a burst with the broker up), else one ZADD INCR each (not
-- ZINCRBY: the commands an ACL user of docs/deployments.md has).
local counting = redis.call('EXISTS', KEYS[4]) == 1
local counts = {}
for _, sha in ipairs(named) do
  redis.call('SET', text_key(KEYS[4], sha), texts[sha], 'NX')
  if counting then
    redis.call('ZADD', KEYS[4], 'INCR', refs[sha], sha)
  else
    counts[#counts + 1] = refs[sha]
    counts[#counts + 1] = sha
  end
end
flush('ZADD', KEYS[4], counts)
return {'ok', applied, skipped, history_error or (recorded and 'ok' or '')}
