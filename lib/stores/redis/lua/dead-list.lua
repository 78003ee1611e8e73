-- deadList: a page of dead letters in (deadAt, id) order, from a cursor, filtered.
--
-- KEYS[1]  {prefix}:seq, the append counter: declared so a Cluster client routes the script to
--           the slot all keys of this outbox share (see prelude.lua)
-- ARGV[1]  B, the key base `<keyPrefix>{prefix}:` (every key below is under it)
-- ARGV[2]  '1' with payload, headers and occurredAt, '0' without (summaries)
-- ARGV[3..9] the dead-letter filter of scanDead (prelude.lua): start score or '-inf', end
--           ('(<ms>' or '+inf'), cursor score or '', cursor id or '', then type, handler, key
--           each '-' (any), '+value' (equal) or '!' (matches nothing)
-- ARGV[10] limit
-- ARGV[11] cap, most dead letters examined
-- Returns  { rows, lastScore, lastId, exhausted 1|0 }, rows as view() makes them (dead-view.lua)

local ids, lastS, lastId, exhausted = scanDead(3, tonumber(ARGV[10]), tonumber(ARGV[11]))
local items = {}
for _, id in ipairs(ids) do table.insert(items, view(id, ARGV[2] == '1')) end
return { items, lastS, lastId, exhausted and 1 or 0 }
