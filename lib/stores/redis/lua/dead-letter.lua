local id = ARGV[2]
local f = owned(id, ARGV[3], ARGV[4])
if not f then return 0 end
unlease(id, f)
local er = pushError(f[11], ARGV[6], ARGV[7], ARGV[8], ARGV[9], tonumber(ARGV[10]))
redis.call('HSET', dkey(id), 'st', 'x', 'rs', ARGV[5], 'da', now, 'er', er)
redis.call('ZADD', DEAD, now, id)
incr('x:' .. f[6], 1)
leaveKey(id, f[5], opt(f[7]))
return 1
