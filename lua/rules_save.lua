-- rules_save: replace the whole rule set, if the stored version is the one
-- the writer read (optimistic concurrency), and bump the version. One
-- script, so that readers never see a set and a version that disagree.
--
-- KEYS[1]  the rules hash (field: rule name, value: the encoded rule)
-- KEYS[2]  the version key (an integer; missing means 0)
-- ARGV[1]  the version the writer expects to replace
-- ARGV[2], ARGV[3], ...  field, value pairs: the new set
--
-- Returns {1, new version} when saved, {0, stored version} when the stored
-- version is not ARGV[1] (nothing written).
local cur = tonumber(redis.call('GET', KEYS[2]) or '0')
if cur ~= tonumber(ARGV[1]) then
  return {0, cur}
end
redis.call('DEL', KEYS[1])
for i = 2, #ARGV, 2 do
  redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1])
end
return {1, redis.call('INCR', KEYS[2])}
