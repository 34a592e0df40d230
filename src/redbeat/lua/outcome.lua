-- Record what a worker reports about a run beat dispatched (redbeat.worker), or a run
-- beat gave up on: the entry's 'run' field (its latest run, see redbeat/runs.py), one
-- record in the outcomes stream per outcome, and the entry's count of failed runs in a
-- row. Times are Redis's clock (TIME), so every worker and beat compare the same one.
--
-- KEYS[1] - the entry's hash
-- KEYS[2] - outcomes stream (key, task_id, due_ms, outcome, started, finished, runtime,
--           worker, error), trimmed to about ARGV[3] records
-- KEYS[3] - failing-runs sorted set (entry key -> failed runs in a row)
-- KEYS[4] - schedule sorted set (the entry's score, lowered when beat waits for the run)
-- ARGV[1] - 'start' (a worker began the run), 'alive' (it still runs it: the record's
--           'at' moves on), 'finish' (it ended: success, failure,
--           retry, revoked, lost) or 'append' (beat gave up on runs and wrote their run
--           fields itself: only the stream and the counts; KEYS[1] unused)
-- ARGV[2] - the report, one JSON object: task_id, due_ms, state, and when known worker,
--           runtime (seconds, measured by the worker), error (one line), started; for
--           'append' a JSON list of them, each with its entry's 'key' (written as a value
--           and a member only, never touched as a key)
-- ARGV[3] - records the outcomes stream keeps (0: none written)
-- ARGV[4] - seconds a silent run counts as running (the worker's redbeat_lost_after;
--           the entry's policy 'lost_after' wins)
--
-- The run field is only ever moved forward: a report about an older slot than the one
-- recorded (a run beat gave up on, finishing after all) goes to the stream only. A run
-- that starts while the recorded one is past its bound, or that is delivered again
-- while recorded as running, records the earlier one as lost. When beat waits for the
-- run ('wake', set by beat) and it ends, the entry's score is lowered to now so the next
-- tick reads it. Nothing is written for an entry that is gone (its hash would be
-- recreated). Only the commands the worker user of docs/outcomes.md has.
--
-- returns {'ok', what}: 'run' (recorded: then the run's bound in seconds follows, so
-- the worker knows how often to say it is alive), 'stale' (a newer run is recorded),
-- 'gone' (no entry hash), 'appended'
local kind = ARGV[1]
local report = cjson.decode(ARGV[2])
local keep = tonumber(ARGV[3])
local clock = redis.call('TIME')
local now = tonumber(clock[1]) + tonumber(clock[2]) / 1000000

local function present(value)
  return value ~= nil and value ~= cjson.null
end

local function append(record, outcome, key)
  key = key or KEYS[1]
  if keep > 0 then
    local fields = {'key', key, 'task_id', tostring(record.task_id),
                    'due_ms', string.format('%d', record.due_ms), 'outcome', outcome}
    for _, name in ipairs({'started', 'finished', 'runtime', 'worker', 'error'}) do
      if present(record[name]) then
        fields[#fields + 1] = name
        fields[#fields + 1] = type(record[name]) == 'number'
          and string.format('%.6f', record[name]) or tostring(record[name])
      end
    end
    redis.pcall('XADD', KEYS[2], 'MAXLEN', '~', keep, '*', unpack(fields))
  end
  if outcome == 'failure' or outcome == 'lost' then
    redis.call('ZINCRBY', KEYS[3], 1, key)
  elseif outcome == 'success' then
    redis.call('ZREM', KEYS[3], key)
  end
end

if kind == 'append' then
  for _, each in ipairs(report) do
    append(each, each.state, each.key)
  end
  return {'ok', 'appended'}
end
if redis.call('TYPE', KEYS[1]).ok ~= 'hash' then
  return {'ok', 'gone'}
end

local current = nil
local text = redis.call('HGET', KEYS[1], 'run')
if text then
  local ok, value = pcall(cjson.decode, text)
  if ok and type(value) == 'table' and tonumber(value.due_ms) then
    current = value
  end
end
local due = tonumber(report.due_ms)
if kind == 'alive' then
  -- the worker still runs it: its silence starts again from now
  if current and current.task_id == report.task_id and current.state == 'running' then
    current.at = now
    redis.call('HSET', KEYS[1], 'run', cjson.encode(current))
    return {'ok', 'run'}
  end
  return {'ok', 'stale'}
end
if current and tonumber(current.due_ms) > due then
  if kind == 'finish' then
    report.finished = now
    append(report, report.state)
  end
  return {'ok', 'stale'}
end

local lost_after = tonumber(ARGV[4])
local policy = redis.call('HGET', KEYS[1], 'policy')
if policy then
  local ok, value = pcall(cjson.decode, policy)
  if ok and type(value) == 'table' and tonumber(value.lost_after) then
    lost_after = tonumber(value.lost_after)
  end
end

local function give_up(record)
  record.finished = now
  append(record, 'lost')
end

local record
if current and current.task_id == report.task_id then
  record = current
else
  if current and kind == 'start' and (current.state == 'running' or current.state == 'retry'
      or current.state == 'queued') and now - (tonumber(current.at) or 0) >= lost_after then
    give_up(current)  -- silent past its bound, and a later run begins: its worker is gone
  end
  record = {task_id = report.task_id, due_ms = due}
end

if kind == 'start' then
  if record.state == 'running' then
    give_up({task_id = record.task_id, due_ms = due, started = record.started,
             worker = record.worker})  -- delivered again: the first attempt's worker is gone
  end
  record.state, record.started, record.worker = 'running', now, report.worker
  record.finished, record.runtime, record.error = nil, nil, nil
else
  record.state, record.finished = report.state, now
  if present(report.runtime) then
    record.runtime = report.runtime
  elseif present(record.started) then
    record.runtime = now - record.started
  end
  record.error = present(report.error) and report.error or nil
  if present(report.worker) then
    record.worker = report.worker
  end
  append(record, report.state)
  if record.wake and report.state ~= 'retry' then
    local score = tonumber(redis.call('ZSCORE', KEYS[4], KEYS[1]))
    if score and score > now then
      redis.call('ZADD', KEYS[4], now, KEYS[1])
    end
    record.wake = nil
  end
end
record.at = now
redis.call('HSET', KEYS[1], 'run', cjson.encode(record))
return {'ok', 'run', tostring(lost_after)}
