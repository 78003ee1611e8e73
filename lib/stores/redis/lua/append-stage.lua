-- appendStage: stores the payloads and headers of a large append, in bounded calls, for
-- append.lua to commit.
--
-- KEYS[1]  {prefix}:seq, the append counter: declared so a Cluster client routes the script to
--           the slot all keys of this outbox share (see prelude.lua)
-- ARGV[1]  B, the key base `<keyPrefix>{prefix}:` (every key below is under it)
-- ARGV[2]  stage batch id
-- ARGV[3]  TTL of the stage hash in ms (an interrupted append leaves nothing for long)
-- ARGV[4..] field, value pairs: p<n> payload and h<n> headers of the n-th event
-- Returns  1

local sk = B .. 'stage:' .. ARGV[2]
for j = 4, #ARGV, 2 do redis.call('HSET', sk, ARGV[j], ARGV[j + 1]) end
redis.call('PEXPIRE', sk, tonumber(ARGV[3]))
return 1
