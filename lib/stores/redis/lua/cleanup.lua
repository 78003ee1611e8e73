local batch = tonumber(ARGV[4])
local dead = 0
if ARGV[3] ~= '' then
  local cutoff = '(' .. (now - tonumber(ARGV[3]))
  for _, id in ipairs(redis.call('ZRANGEBYSCORE', DEAD, '-inf', cutoff, 'LIMIT', 0, batch)) do
    dead = dead + dropDead(id)
  end
end
local events = 0
local cutoff = '(' .. (now - tonumber(ARGV[2]))
for _, ev in ipairs(redis.call('ZRANGEBYSCORE', DONE, '-inf', cutoff, 'LIMIT', 0, batch)) do
  redis.call('DEL', ekey(ev))
  redis.call('ZREM', DONE, ev)
  events = events + 1
end
return { events, dead }
