-- concurrency release: remove one holder id (an unknown id removes
-- nothing: the Store answers lease.ErrNoSlot) and reap the expired ones.
--
-- KEYS[1]  sorted set: member = holder id, score = its expiry in µs
-- ARGV     id
-- returns  1 if id was held, else 0
--
-- Mirrors lease.ConcurrencyState.Release: id counts as held until it is
-- reaped, except that a key whose every id has expired (its latest score
-- not after now) is no state, as the Go state is past its expiry: Redis
-- keeps the key up to a few ms longer (ttl rounds up, plus 1ms).
-- (Joined after prelude.lua: key, now, ttl, ms and fmt come from there.)
local last = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')[2]
if not last or last + 0 <= now then
  redis.call('DEL', key)
  return 0
end
local removed = redis.call('ZREM', key, ARGV[1])
redis.call('ZREMRANGEBYSCORE', key, '-inf', fmt(now))
return removed
