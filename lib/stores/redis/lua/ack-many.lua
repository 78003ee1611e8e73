-- ackMany: ack.lua for many leases in one script, grouped by owner and token (a claim gives all
-- its leases one token, so a batch of acks is usually one or a few groups).
--
-- KEYS[1]  {prefix}:seq, the append counter: declared so a Cluster client routes the script to
--           the slot all keys of this outbox share (see prelude.lua)
-- ARGV[1]  B, the key base `<keyPrefix>{prefix}:` (every key below is under it)
-- ARGV[2..] per group: owner, token, n, then the ids of its n leases
-- Returns  the positions (1-based, in argument order) of the leases not acknowledged: usually
--           none, so the reply stays small

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
