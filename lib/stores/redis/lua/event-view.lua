-- eventView: one event with the deliveries still stored for it.
--
-- KEYS[1]  {prefix}:seq, the append counter: declared so a Cluster client routes the script to
--           the slot all keys of this outbox share (see prelude.lua)
-- ARGV[1]  B, the key base `<keyPrefix>{prefix}:` (every key below is under it)
-- ARGV[2]  event id
-- ARGV[3..] handler names to look for ('*', the unexpanded delivery, is always looked for)
-- Returns  { eventRow, { record, ... } } (delivery-view.lua), or { false } when unknown

local ev = eventRow(ARGV[2])
if not ev then return { false } end
local handlers = { '*' }
for j = 3, #ARGV do table.insert(handlers, ARGV[j]) end
return { ev, eventRecords(ARGV[2], handlers) }
