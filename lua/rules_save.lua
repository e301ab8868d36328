-- rules_save: replace the whole rule set, if the stored version is the one
-- the writer read (optimistic concurrency), and set the version the writer
-- gives with the writer's signature. One script, so that readers never see
-- a set, a version and a signature that disagree.
--
-- KEYS[1]  the rules hash (field: rule name, value: the encoded rule)
-- KEYS[2]  the version key (an integer; missing means 0)
-- KEYS[3]  the signature key (opaque to Redis; deleted when ARGV[3] is "")
-- ARGV[1]  the version the writer expects to replace
-- ARGV[2]  the new version (the writer chooses it: above every one it saw)
-- ARGV[3]  the signature of the new set ("" for none)
-- ARGV[4], ARGV[5], ...  field, value pairs: the new set
--
-- Versions are compared and returned as decimal strings: a Lua number
-- (a double) is exact only up to 2^53.
--
-- Returns {"1", new version} when saved, {"0", stored version} when the
-- stored version is not ARGV[1] (nothing written).
local cur = redis.call('GET', KEYS[2]) or '0'
if cur ~= ARGV[1] then
  return {'0', cur}
end
redis.call('DEL', KEYS[1])
for i = 4, #ARGV, 2 do
  redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1])
end
if ARGV[3] == '' then
  redis.call('DEL', KEYS[3])
else
  redis.call('SET', KEYS[3], ARGV[3])
end
redis.call('SET', KEYS[2], ARGV[2])
return {'1', ARGV[2]}
