-- ack: acknowledges one delivery: it is deleted, its key's next delivery becomes active, its
-- event completes when no delivery of it is left (kept in `done` for the retention window).
--
-- KEYS[1]  {prefix}:seq, the append counter: declared so a Cluster client routes the script to
--           the slot all keys of this outbox share (see prelude.lua)
-- ARGV[1]  B, the key base `<keyPrefix>{prefix}:` (every key below is under it)
-- ARGV[2]  delivery id
-- ARGV[3]  owner (worker id) of the lease
-- ARGV[4]  lease token
-- Returns  1, or 0 when the lease is lost (nothing changed)

local r = ackOne(ARGV[2], ARGV[3], ARGV[4])
ackFlush()
return r
