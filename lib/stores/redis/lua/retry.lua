-- retry: gives a failed delivery back, runnable again after a delay, with the error recorded.
--
-- KEYS[1]  {prefix}:seq, the append counter: declared so a Cluster client routes the script to
--           the slot all keys of this outbox share (see prelude.lua)
-- ARGV[1]  B, the key base `<keyPrefix>{prefix}:` (every key below is under it)
-- ARGV[2]  delivery id
-- ARGV[3]  owner (worker id) of the lease
-- ARGV[4]  lease token
-- ARGV[5]  delay in ms
-- ARGV[6]  error name, as JSON text of the string
-- ARGV[7]  error message, as JSON text
-- ARGV[8]  attempt
-- ARGV[9]  worker id, as JSON text
-- ARGV[10] most error entries kept in `er` (oldest dropped)
-- ARGV[11] the first lines of the error's stack as JSON text, or '' for none
-- Returns  1, or 0 when the lease is lost (nothing changed)

local id = ARGV[2]
local f = owned(id, ARGV[3], ARGV[4])
if not f then return 0 end
unlease(id, f)
local er = pushError(f[11], ARGV[6], ARGV[7], ARGV[8], ARGV[9], tonumber(ARGV[10]), ARGV[11])
local av = now + tonumber(ARGV[5])
redis.call('HSET', dkey(id), 'st', 'p', 'av', av, 'er', er)
redis.call('ZADD', PEND, av, id)
incr('p:' .. f[6], 1)
requeue(id, f[5], opt(f[7]), tonumber(f[8]), av)
return 1
