local ids, lastS, lastId, exhausted = scanDead(3, tonumber(ARGV[10]), tonumber(ARGV[11]))
local items = {}
for _, id in ipairs(ids) do table.insert(items, view(id, ARGV[2] == '1')) end
return { items, lastS, lastId, exhausted and 1 or 0 }
