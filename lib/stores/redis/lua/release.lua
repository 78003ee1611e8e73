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
