-- release: gives a delivery back unrun (shutdown, abandoned run): runnable now, its attempt not
-- counted.
--
-- KEYS[1]  {prefix}:seq, the append counter: declared so a Cluster client routes the script to
--           the slot all keys of this outbox share (see prelude.lua)
-- ARGV[1]  B, the key base `<keyPrefix>{prefix}:` (every key below is under it)
-- ARGV[2]  delivery id
-- ARGV[3]  owner (worker id) of the lease
-- ARGV[4]  lease token
-- Returns  1, or 0 when the lease is lost (nothing changed)

local id = ARGV[2]
local f = owned(id, ARGV[3], ARGV[4])
if not f then return 0 end
unlease(id, f)
local at = tonumber(f[10]) - 1
if at < 0 then at = 0 end
redis.call('HSET', dkey(id), 'st', 'p', 'av', now, 'at', at)
redis.call('ZADD', PEND, now, id)
incr('p:' .. f[6], 1)
requeue(id, f[5], opt(f[7]), tonumber(f[8]), now)
return 1
