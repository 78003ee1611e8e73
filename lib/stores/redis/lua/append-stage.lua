local sk = B .. 'stage:' .. ARGV[2]
for j = 4, #ARGV, 2 do redis.call('HSET', sk, ARGV[j], ARGV[j + 1]) end
redis.call('PEXPIRE', sk, tonumber(ARGV[3]))
return 1
