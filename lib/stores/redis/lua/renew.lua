-- renew: extends a lease that is still owned and live.
--
-- KEYS[1]  {prefix}:seq, the append counter: declared so a Cluster client routes the script to
--           the slot all keys of this outbox share (see prelude.lua)
-- ARGV[1]  B, the key base `<keyPrefix>{prefix}:` (every key below is under it)
-- ARGV[2]  delivery id
-- ARGV[3]  owner (worker id) of the lease
-- ARGV[4]  lease token
-- ARGV[5]  lease duration in ms, from now
-- Returns  the new leaseUntil (ms), or 0 when the lease is lost

local f = owned(ARGV[2], ARGV[3], ARGV[4])
if not f then return 0 end
local lu = now + tonumber(ARGV[5])
redis.call('HSET', dkey(ARGV[2]), 'lu', lu)
redis.call('ZADD', hkey('l', f[5]), lu, ARGV[2])
return lu
