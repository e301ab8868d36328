-- rules_load: the rule set and its version, read together.
--
-- KEYS[1]  the rules hash
-- KEYS[2]  the version key
--
-- Returns {version (a string; "0" when never written), {field, value, ...}}.
return {redis.call('GET', KEYS[2]) or '0', redis.call('HGETALL', KEYS[1])}
