local count = 0
if ARGV[2] == 'ids' then
  for j = 3, #ARGV do count = count + dropDead(ARGV[j]) end
  return { count, '', '', 1 }
end
local ids, lastS, lastId, exhausted = scanDead(3, tonumber(ARGV[10]), tonumber(ARGV[11]))
for _, id in ipairs(ids) do count = count + dropDead(id) end
return { count, lastS, lastId, exhausted and 1 or 0 }
