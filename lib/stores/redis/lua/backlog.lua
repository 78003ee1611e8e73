-- backlog: due pending deliveries per handler, from the oldest `limit` of the `pend` set.
--
-- KEYS[1]  {prefix}:seq, the append counter: declared so a Cluster client routes the script to
--           the slot all keys of this outbox share (see prelude.lua)
-- ARGV[1]  B, the key base `<keyPrefix>{prefix}:` (every key below is under it)
-- ARGV[2]  limit, most due deliveries read
-- Returns  { handler, count, oldest availableAt, handler, count, oldest, ... }

local chunk = redis.call('ZRANGEBYSCORE', PEND, '-inf', now, 'WITHSCORES', 'LIMIT', 0, tonumber(ARGV[2]))
local count, oldest, order = {}, {}, {}
for j = 1, #chunk, 2 do
  local h = redis.call('HGET', dkey(chunk[j]), 'h')
  if h then
    if not count[h] then
      count[h] = 0
      oldest[h] = chunk[j + 1]
      table.insert(order, h)
    end
    count[h] = count[h] + 1
  end
end
local out = {}
for _, h in ipairs(order) do
  table.insert(out, h)
  table.insert(out, count[h])
  table.insert(out, oldest[h])
end
return out
