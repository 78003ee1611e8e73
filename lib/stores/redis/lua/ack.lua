local r = ackOne(ARGV[2], ARGV[3], ARGV[4])
ackFlush()
return r
