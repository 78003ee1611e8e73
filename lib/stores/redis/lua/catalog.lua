-- catalog: event types and (type, handler) pairs, for the admin API's pickers.
--
-- KEYS[1]  {prefix}:seq, the append counter: declared so a Cluster client routes the script to
--           the slot all keys of this outbox share (see prelude.lua)
-- ARGV[1]  B, the key base `<keyPrefix>{prefix}:` (every key below is under it)
-- ARGV[2]  limit, most pending deliveries and most dead letters read for handlers
-- Returns  { { type, ... } from the counters, { type, handler, type, handler, ... } }

local types = {}
local cnt = redis.call('HGETALL', CNT)
for j = 1, #cnt, 2 do
  local t = string.match(cnt[j], '^[plx]:(.*)$')
  if t then types[#types + 1] = t end
end
local found = {}
local n = tonumber(ARGV[2])
for _, set in ipairs({ PEND, DEAD }) do
  for _, id in ipairs(redis.call('ZRANGE', set, 0, n - 1)) do
    local f = redis.call('HMGET', dkey(id), 't', 'h')
    if f[1] and f[2] then
      found[#found + 1] = f[1]
      found[#found + 1] = f[2]
    end
  end
end
return { types, found }
