-- deadGet: one dead letter with its event.
--
-- KEYS[1]  {prefix}:seq, the append counter: declared so a Cluster client routes the script to
--           the slot all keys of this outbox share (see prelude.lua)
-- ARGV[1]  B, the key base `<keyPrefix>{prefix}:` (every key below is under it)
-- ARGV[2]  delivery id
-- Returns  { row } with row as view() makes it (dead-view.lua), or { false } if it is not dead

return { view(ARGV[2], true) }
