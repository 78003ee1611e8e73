return redis.call('DEL', B .. 'stage:' .. ARGV[2])
