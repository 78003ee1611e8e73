-- cleanup: deletes completed events older than their retention, and dead letters older than
-- theirs, at most batch of each.
--
-- KEYS[1]  {prefix}:seq, the append counter: declared so a Cluster client routes the script to
--           the slot all keys of this outbox share (see prelude.lua)
-- ARGV[1]  B, the key base `<keyPrefix>{prefix}:` (every key below is under it)
-- ARGV[2]  delivered retention in ms
-- ARGV[3]  dead-letter retention in ms, or '' (kept forever)
-- ARGV[4]  batch
-- Returns  { events deleted, dead letters deleted }

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
  unindexEvent(ev)
  redis.call('DEL', ekey(ev))
  redis.call('ZREM', DONE, ev)
  events = events + 1
end
return { events, dead }
