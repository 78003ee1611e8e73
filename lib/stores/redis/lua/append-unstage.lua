-- appendUnstage: drops the stage hash of an append that failed before its commit.
--
-- KEYS[1]  {prefix}:seq, the append counter: declared so a Cluster client routes the script to
--           the slot all keys of this outbox share (see prelude.lua)
-- ARGV[1]  B, the key base `<keyPrefix>{prefix}:` (every key below is under it)
-- ARGV[2]  stage batch id
-- Returns  the number of keys deleted (0 or 1)

return redis.call('DEL', B .. 'stage:' .. ARGV[2])
