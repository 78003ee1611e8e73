local refused = {}
local j, pos = 2, 0
while j <= #ARGV do
  local owner, token, n = ARGV[j], ARGV[j + 1], tonumber(ARGV[j + 2])
  j = j + 3
  for _ = 1, n do
    pos = pos + 1
    if ackOne(ARGV[j], owner, token) == 0 then table.insert(refused, pos) end
    j = j + 1
  end
end
ackFlush()
return refused
