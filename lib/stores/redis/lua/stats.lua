-- stats: counts for health and metrics, read at one instant.
--
-- KEYS[1]  {prefix}:seq, the append counter: declared so a Cluster client routes the script to
--           the slot all keys of this outbox share (see prelude.lua)
-- ARGV[1]  B, the key base `<keyPrefix>{prefix}:` (every key below is under it)
-- Returns  { now, pending, due, oldest pending availableAt or '', leased, dead, the cnt hash as
--           field, value pairs (p:/l:/x:<type>) }

local oldest = redis.call('ZRANGE', PEND, 0, 0, 'WITHSCORES')[2] or ''
return { now, redis.call('ZCARD', PEND), redis.call('ZCOUNT', PEND, '-inf', now), oldest,
  redis.call('HGET', CNT, 'l') or '0', redis.call('ZCARD', DEAD), redis.call('HGETALL', CNT) }
