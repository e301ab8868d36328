-- rules_load: the rule set, its version and its signature, read together.
--
-- KEYS[1]  the rules hash
-- KEYS[2]  the version key
-- KEYS[3]  the signature key
--
-- Returns {version (a string; "0" when never written), {field, value, ...},
-- signature (a string; "" when none)}.
return {redis.call('GET', KEYS[2]) or '0', redis.call('HGETALL', KEYS[1]), redis.call('GET', KEYS[3]) or ''}
