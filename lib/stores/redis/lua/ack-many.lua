-- ackMany: ack.lua for many leases in one script, grouped by owner and token (a claim gives all
-- its leases one token, so a batch of acks is usually one or a few groups).
--
-- KEYS[1]  {prefix}:seq, the append counter: declared so a Cluster client routes the script to
--           the slot all keys of this outbox share (see prelude.lua)
-- ARGV[1]  B, the key base `<keyPrefix>{prefix}:` (every key below is under it)
-- ARGV[2..] per group: owner, token, n, then the ids of its n leases; or owner, token, '#n', then
--           one argument holding the n ids back to back, 36 bytes each (the client packs ids of
--           that length so: every id the scripts make is a UUID's text)
-- Returns  the positions (1-based, in argument order) of the leases not acknowledged: usually
--           none, so the reply stays small

local refused = {}
local j, pos = 2, 0
while j <= #ARGV do
  local owner, token, n = ARGV[j], ARGV[j + 1], ARGV[j + 2]
  if string.byte(n, 1) == 35 then
    local packed = ARGV[j + 3]
    j = j + 4
    for s = 1, tonumber(string.sub(n, 2)) * 36, 36 do
      pos = pos + 1
      if ackOne(string.sub(packed, s, s + 35), owner, token) == 0 then
        refused[#refused + 1] = pos
      end
    end
  else
    j = j + 3
    for _ = 1, tonumber(n) do
      pos = pos + 1
      if ackOne(ARGV[j], owner, token) == 0 then refused[#refused + 1] = pos end
      j = j + 1
    end
  end
end
ackFlush()
return refused
