-- eventsByKey: the events of one ordering key, newest first, each with its stored deliveries.
-- Reads the `ek:<key>` index (events appended since it exists); entries of events since deleted
-- are dropped from it on the way.
--
-- KEYS[1]  {prefix}:seq, the append counter: declared so a Cluster client routes the script to
--           the slot all keys of this outbox share (see prelude.lua)
-- ARGV[1]  B, the key base `<keyPrefix>{prefix}:` (every key below is under it)
-- ARGV[2]  key
-- ARGV[3]  seq to read below, or '' (from the newest)
-- ARGV[4]  limit, most events returned
-- ARGV[5..] handler names to look for ('*' always)
-- Returns  { { eventRow, { record, ... } }, ... }

local idx = B .. 'ek:' .. ARGV[2]
local max = '+inf'
if ARGV[3] ~= '' then max = '(' .. ARGV[3] end
local limit = tonumber(ARGV[4])
local handlers = { '*' }
for j = 5, #ARGV do table.insert(handlers, ARGV[j]) end
local out = {}
while #out < limit do
  local ids = redis.call('ZREVRANGEBYSCORE', idx, max, '-inf', 'WITHSCORES', 'LIMIT', 0, limit - #out)
  if #ids == 0 then break end
  for j = 1, #ids, 2 do
    local ev = eventRow(ids[j])
    if ev then
      table.insert(out, { ev, eventRecords(ids[j], handlers) })
    else
      redis.call('ZREM', idx, ids[j])
    end
    max = '(' .. ids[j + 1]
  end
end
return out
