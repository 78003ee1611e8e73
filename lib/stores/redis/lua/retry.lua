local id = ARGV[2]
local f = owned(id, ARGV[3], ARGV[4])
if not f then return 0 end
unlease(id, f)
local er = pushError(f[11], ARGV[6], ARGV[7], ARGV[8], ARGV[9], tonumber(ARGV[10]))
local av = now + tonumber(ARGV[5])
redis.call('HSET', dkey(id), 'st', 'p', 'av', av, 'er', er)
redis.call('ZADD', PEND, av, id)
incr('p:' .. f[6], 1)
requeue(id, f[5], opt(f[7]), tonumber(f[8]), av)
return 1
