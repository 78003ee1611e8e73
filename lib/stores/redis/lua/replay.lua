-- replay: makes dead letters pending again (attempts reset), by id or by filter.
--
-- KEYS[1]  {prefix}:seq, the append counter: declared so a Cluster client routes the script to
--           the slot all keys of this outbox share (see prelude.lua)
-- ARGV[1]  B, the key base `<keyPrefix>{prefix}:` (every key below is under it)
-- ARGV[2]  'ids' or 'filter'
-- ARGV[3]  availableAt ms, or '' (now)
-- ARGV[4..] with 'ids': the dead-letter ids
-- ARGV[4..10] with 'filter': the dead-letter filter of scanDead (prelude.lua): start
--           score or '-inf', end ('(<ms>' or '+inf'), cursor score or '', cursor id or '',
--           then type, handler, key, each '-' (any), '+value' (equal) or '!' (matches nothing)
-- ARGV[11] batch, most to replay
-- ARGV[12] cap, most dead letters examined
-- Returns  { count, lastScore, lastId, exhausted 1|0 }: the cursor where the scan stopped (ids:
--           { count, '', '', 1 })

local av = now
if ARGV[3] ~= '' then av = tonumber(ARGV[3]) end
local function replayOne(id)
  local f = redis.call('HMGET', dkey(id), 'st', 'h', 't', 'k', 'sq')
  if f[1] ~= 'x' then return 0 end
  redis.call('HSET', dkey(id), 'st', 'p', 'at', 0, 'av', av, 'ac', '0')
  redis.call('HDEL', dkey(id), 'rs', 'da')
  redis.call('ZREM', DEAD, id)
  redis.call('ZADD', PEND, av, id)
  incr('x:' .. f[3], -1)
  incr('p:' .. f[3], 1)
  enqueue(id, f[2], opt(f[4]), tonumber(f[5]), av)
  return 1
end
local count = 0
if ARGV[2] == 'ids' then
  for j = 4, #ARGV do count = count + replayOne(ARGV[j]) end
  return { count, '', '', 1 }
end
local ids, lastS, lastId, exhausted = scanDead(4, tonumber(ARGV[11]), tonumber(ARGV[12]))
for _, id in ipairs(ids) do count = count + replayOne(id) end
return { count, lastS, lastId, exhausted and 1 or 0 }
