-- concurrency release: remove one holder id (an unknown id removes
-- nothing: the Store answers lease.ErrNoSlot) and reap the expired ones.
--
-- KEYS[1]  sorted set: member = holder id, score = its expiry in µs
-- ARGV     id
-- returns  1 if id was held, else 0
-- (Joined after prelude.lua: key, now, ttl, ms and fmt come from there.)
local removed = redis.call('ZREM', key, ARGV[1])
redis.call('ZREMRANGEBYSCORE', key, '-inf', fmt(now))
return removed
