-- concurrency release: remove one holder id (an unknown id is not an
-- error) and reap the expired ones.
--
-- KEYS[1]  sorted set: member = holder id, score = its expiry in µs
-- ARGV     id
-- returns  1 if id was held, else 0
local key = KEYS[1]
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000000 + tonumber(clock[2])
local removed = redis.call('ZREM', key, ARGV[1])
redis.call('ZREMRANGEBYSCORE', key, '-inf', string.format('%.17g', now))
return removed
