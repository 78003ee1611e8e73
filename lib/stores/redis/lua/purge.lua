-- purge: deletes dead letters, by id or by filter; an event goes with its last delivery.
--
-- KEYS[1]  {prefix}:seq, the append counter: declared so a Cluster client routes the script to
--           the slot all keys of this outbox share (see prelude.lua)
-- ARGV[1]  B, the key base `<keyPrefix>{prefix}:` (every key below is under it)
-- ARGV[2]  'ids' or 'filter'
-- ARGV[3..] with 'ids': the dead-letter ids
-- ARGV[3..9] with 'filter': the dead-letter filter of scanDead (prelude.lua): start
--           score or '-inf', end ('(<ms>' or '+inf'), cursor score or '', cursor id or '',
--           then type, handler, key, each '-' (any), '+value' (equal) or '!' (matches nothing)
-- ARGV[10] batch, most to purge
-- ARGV[11] cap, most dead letters examined
-- Returns  { count, lastScore, lastId, exhausted 1|0 } (ids: { count, '', '', 1 })

local count = 0
if ARGV[2] == 'ids' then
  for j = 3, #ARGV do count = count + dropDead(ARGV[j]) end
  return { count, '', '', 1 }
end
local ids, lastS, lastId, exhausted = scanDead(3, tonumber(ARGV[10]), tonumber(ARGV[11]))
for _, id in ipairs(ids) do count = count + dropDead(id) end
return { count, lastS, lastId, exhausted and 1 or 0 }
