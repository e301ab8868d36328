-- concurrency acquire: reap expired holders, then admit id if fewer than
-- limit are held.
--
-- KEYS[1]  sorted set: member = holder id, score = its expiry in µs
-- ARGV     limit, ttl_us (the policy's period), id, hits (0 = peek)
-- returns  {allowed (0/1), remaining, retry_after_ms, reset_ms}
--
-- Mirrors lease.ConcurrencyState.Acquire: ids whose expiry is not after now
-- are reaped; an id already held is renewed (expiry now + ttl) and allowed
-- even at the limit; a peek (hits 0) is allowed if an acquire would be and
-- records nothing. RetryAfter on denial is the time until the earliest
-- holder expires; Reset the time until the latest one does (0 when none).
-- The key expires with its latest holder.
-- (Joined after prelude.lua: key, now, ttl, ms and fmt come from there.)
local limit, pu = ARGV[1] + 0, ARGV[2] + 0
local id, hits = ARGV[3], ARGV[4] + 0

redis.call('ZREMRANGEBYSCORE', key, '-inf', fmt(now))
local held = redis.call('ZCARD', key)
local mine = redis.call('ZSCORE', key, id)

local allowed, retry = 1, 0
if not mine and held >= limit then
  allowed = 0
  retry = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')[2] - now
elseif hits > 0 then
  redis.call('ZADD', key, fmt(now + pu), id)
  if not mine then
    held = held + 1
  end
end

local reset = 0
if held > 0 then
  reset = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')[2] - now
  if allowed == 1 and hits > 0 then
    redis.call('PEXPIRE', key, ttl(reset))
  end
end
return {allowed, math.max(0, limit - held), ms(retry), ms(reset)}
