local f = owned(ARGV[2], ARGV[3], ARGV[4])
if not f then return 0 end
local lu = now + tonumber(ARGV[5])
redis.call('HSET', dkey(ARGV[2]), 'lu', lu)
redis.call('ZADD', hkey('l', f[5]), lu, ARGV[2])
return lu
