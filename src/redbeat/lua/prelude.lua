-- Shared by every script: store.load_script puts this text in front of each (EVAL
-- scripts cannot import one another).
--
-- Every script replies in one shape, {status, payload...}, which store.script_reply
-- decodes in one place: status is 'ok', or what the script's header names instead
-- ('lost' when the lease is another node's, with that holder or false; tick.lua's
-- 'leader', 'acquired' and 'standby'), and the payload follows as the header says.
--
-- CHUNK - arguments per variadic call (ZADD, HSET, HMGET, ...), below Lua's unpack limit
local CHUNK = 2000

-- The lease check of every script that writes under the lease: nil when this node
-- holds it, otherwise the reply {'lost', holder|false} to return as is. (With locking
-- disabled the client sends an empty token, and tick, commit and sync_statics skip the
-- check; an empty token holds no lock here.)
local function lease_lost(lock_key, token)
  local holder = redis.call('GET', lock_key)
  if holder == token then
    return nil
  end
  return {'lost', holder}
end

-- One call of `command key ...args` per CHUNK arguments.
local function flush(command, key, args)
  for first = 1, #args, CHUNK do
    redis.call(command, key, unpack(args, first, math.min(first + CHUNK - 1, #args)))
  end
end


-- A pending record read by structure: the record as a table (nil when it is not a JSON
-- object) and the held definition it names, its "definition_sha1" field (nil when it
-- names none: the older format with the definition inside, or a hand-written record).
-- The records have two writers (commit.lua's concatenation, Python's json.dumps), so a
-- pattern on their text would depend on the spacing each happens to write.
local function read_pending(text)
  local ok, record = pcall(cjson.decode, text)
  if not ok or type(record) ~= 'table' then
    return nil, nil
  end
  local sha = record.definition_sha1
  if type(sha) ~= 'string' or #sha ~= 40 or string.find(sha, '%X') then
    sha = nil
  end
  return record, sha
end

-- SHA-1 of a string as 40 hex digits: redis.sha1hex where the server has it; on a Lua
-- without it (fakeredis, the Redis of many projects' test suites, has no redis.sha1hex
-- and no bit library), the same digest computed with arithmetic on 32-bit words held
-- in doubles, 4 bits at a time through 16 x 16 tables built on first use. Slow, and
-- only ever used there.
local sha1hex = redis.sha1hex
if not sha1hex then
  local WORD = 4294967296
  local AND, XOR
  local function tables()
    AND, XOR = {}, {}
    for a = 0, 15 do
      for b = 0, 15 do
        local both, either, bit, x, y = 0, 0, 1, a, b
        for _ = 1, 4 do
          local p, q = x % 2, y % 2
          if p == 1 and q == 1 then both = both + bit end
          if p ~= q then either = either + bit end
          x, y, bit = (x - p) / 2, (y - q) / 2, bit * 2
        end
        AND[a * 16 + b], XOR[a * 16 + b] = both, either
      end
    end
  end
  local function bitwise(table_, a, b)
    local result, scale = 0, 1
    for _ = 1, 8 do
      local x, y = a % 16, b % 16
      result = result + table_[x * 16 + y] * scale
      a, b, scale = (a - x) / 16, (b - y) / 16, scale * 16
    end
    return result
  end
  local function rotate(a, n)
    local split = 2 ^ (32 - n)
    return (a % split) * 2 ^ n + math.floor(a / split)
  end
  sha1hex = function(text)
    if not AND then tables() end
    local h = {1732584193, 4023233417, 2562383102, 271733878, 3285377520}
    local length = #text
    local padded = text .. '\128' .. string.rep('\0', (55 - length) % 64)
    local bits = length * 8
    local tail = {}
    for i = 8, 1, -1 do
      tail[i] = string.char(bits % 256)
      bits = math.floor(bits / 256)
    end
    padded = padded .. table.concat(tail)
    local w = {}
    for block = 1, #padded, 64 do
      for i = 0, 15 do
        local b1, b2, b3, b4 = string.byte(padded, block + i * 4, block + i * 4 + 3)
        w[i] = ((b1 * 256 + b2) * 256 + b3) * 256 + b4
      end
      for i = 16, 79 do
        w[i] = rotate(bitwise(XOR, bitwise(XOR, w[i - 3], w[i - 8]),
                              bitwise(XOR, w[i - 14], w[i - 16])), 1)
      end
      local a, b, c, d, e = h[1], h[2], h[3], h[4], h[5]
      for i = 0, 79 do
        local f, k
        if i < 20 then
          f, k = bitwise(AND, b, c) + bitwise(AND, WORD - 1 - b, d), 1518500249
        elseif i < 40 then
          f, k = bitwise(XOR, bitwise(XOR, b, c), d), 1859775393
        elseif i < 60 then
          f = bitwise(XOR, bitwise(XOR, bitwise(AND, b, c), bitwise(AND, b, d)),
                      bitwise(AND, c, d))
          k = 2400959708
        else
          f, k = bitwise(XOR, bitwise(XOR, b, c), d), 3395469782
        end
        local t = (rotate(a, 5) + f + e + k + w[i]) % WORD
        a, b, c, d, e = t, a, rotate(b, 30), c, d
      end
      h[1], h[2], h[3] = (h[1] + a) % WORD, (h[2] + b) % WORD, (h[3] + c) % WORD
      h[4], h[5] = (h[4] + d) % WORD, (h[5] + e) % WORD
    end
    return string.format('%08x%08x%08x%08x%08x', h[1], h[2], h[3], h[4], h[5])
  end
end

-- Held slots (docs/data-format.md, "Pending records"). No key of them is a hash, so code
-- written for celery-redbeat 2.4.2 that lists the prefix and reads `definition` from
-- every hash it finds meets only entries:
--   <pending>              sorted set: member = task id, score = the slot's due time
--   <pending>:<task id>    string: the pending record (JSON)
--   <held>                 sorted set: member = sha1 of a definition text, score = how
--                          many pending records name it
--   <held>:<sha1>          string: the definition text
-- The record and text keys extend their index's name, so a hash-tagged prefix keeps
-- them in its Cluster slot.
local function record_key(pending, task_id)
  return pending .. ':' .. task_id
end

local function text_key(held, sha)
  return held .. ':' .. sha
end

-- The due time a record's index score is: its "due" field, 0 when it has none (read
-- first, and dropped by the client as unreadable).
local function due_of(record)
  local due = record and tonumber(record.due)
  if not due or due ~= due or due == math.huge or due == -math.huge then
    return 0
  end
  return due
end

-- Releases before this layout kept the held slots in two hashes under the same names
-- (<pending>: task id -> record; <held>: sha1 -> text, '<sha1>:refs' -> count). A fleet
-- upgraded while slots are held finds them so: each hash is rewritten in the layout
-- above in the script that meets it, whole (the old and new shapes share a key name,
-- so they cannot coexist), every record and count kept. Any other type is left alone:
-- the scripts then fail with WRONGTYPE, which the client reports.
local function adopt_old_pending(pending)
  local all = redis.call('HGETALL', pending)
  redis.call('DEL', pending)
  local index = {}
  for i = 1, #all, 2 do
    redis.call('SET', record_key(pending, all[i]), all[i + 1])
    index[#index + 1] = due_of((read_pending(all[i + 1])))
    index[#index + 1] = all[i]
  end
  flush('ZADD', pending, index)
end

local function adopt_old_held(held)
  local all = redis.call('HGETALL', held)
  redis.call('DEL', held)
  local texts, counts = {}, {}
  for i = 1, #all, 2 do
    local sha = string.match(all[i], '^(%x+):refs$')
    if sha then
      counts[sha] = tonumber(all[i + 1]) or 0
    else
      texts[all[i]] = all[i + 1]
    end
  end
  local index = {}
  for sha, text in pairs(texts) do
    redis.call('SET', text_key(held, sha), text)
    index[#index + 1] = counts[sha] or 0  -- a count without its text names nothing: gone
    index[#index + 1] = sha
  end
  flush('ZADD', held, index)
end

-- Whether any slot is held, after adopting the old shapes (both keys' types read: what
-- the writing scripts call first; the tick reads only the pending key's, see tick.lua).
local function adopt_held_shapes(pending, held)
  if redis.call('TYPE', held).ok == 'hash' then
    adopt_old_held(held)
  end
  local kind = redis.call('TYPE', pending).ok
  if kind == 'hash' then
    adopt_old_pending(pending)
    return true
  end
  return kind ~= 'none'
end
