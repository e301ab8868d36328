-- sliding_log: the exact rolling window over a sorted set of stamps:
-- cleanup, count, min-interval check against the newest stamp, insert and
-- expire in one atomic script. Mirrors lease.SlidingLogState.Check:
--   - stamps at or before now - P leave the window (a stamp lives exactly
--     one period);
--   - hits > L: denied, retry after one period;
--   - count + hits > L: denied, retry when the k-th oldest stamp leaves
--     (k = count + hits - L), or after the min_interval wait if longer;
--   - min_interval > 0 and the newest stamp is younger than it: denied,
--     retry when it is min_interval old;
--   - else allowed, and hits stamps of now are recorded. hits = 0 peeks and
--     is always allowed.
--   Remaining = max(0, L - count); Reset = time until the newest stamp
--   leaves the window (0 when empty).
--
-- KEYS[1]  sorted set: one member per admitted hit, scored by its stamp
--          (unix µs); members are "<stamp>-<n>", unique
-- ARGV     limit, period_us, min_interval_us, hits
-- returns  {allowed (0/1), remaining, retry_after_ms, reset_ms}
--
-- The key expires one period after its newest stamp, when the whole log
-- has left the window.
-- (Joined after prelude.lua: key, now, ttl, ms and fmt come from there.)
local limit, pu = ARGV[1] + 0, ARGV[2] + 0
local mi, hits = ARGV[3] + 0, ARGV[4] + 0

redis.call('ZREMRANGEBYSCORE', key, '-inf', fmt(now - pu))
local count = redis.call('ZCARD', key)
local newest = 0
if count > 0 then
  newest = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')[2] + 0
end

local allowed, retry = 0, 0
if hits == 0 then
  allowed = 1 -- a peek is never denied
elseif hits > limit then
  retry = pu
elseif count + hits > limit then
  local k = count + hits - limit
  local at = redis.call('ZRANGE', key, k - 1, k - 1, 'WITHSCORES')[2] + 0
  retry = at + pu - now
  if mi > 0 and count > 0 then
    retry = math.max(retry, newest + mi - now)
  end
elseif mi > 0 and count > 0 and now - newest < mi then
  retry = newest + mi - now
else
  allowed = 1
  if hits > 0 then
    -- Stored times never move back: a clock that went back records at
    -- the newest stamp. Members are added with NX and a suffix that counts
    -- up, so none is ever overwritten.
    local at = math.max(now, newest)
    local stamp = fmt(at)
    local added, seq = 0, count
    while added < hits do
      local batch = {}
      for _ = 1, math.min(hits - added, 500) do
        seq = seq + 1
        batch[#batch + 1] = stamp
        batch[#batch + 1] = stamp .. '-' .. fmt(seq)
      end
      added = added + redis.call('ZADD', key, 'NX', unpack(batch))
    end
    count = count + hits
    newest = at
    redis.call('PEXPIRE', key, ttl(at + pu - now))
  end
end

local reset = 0
if count > 0 then
  reset = newest + pu - now
end
return {allowed, math.max(0, limit - count), ms(retry), ms(reset)}
