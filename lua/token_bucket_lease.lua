-- token_bucket lease: refill, then grant min(want, avail) if avail >= need.
-- Mirrors lease.TokenBucketState.Lease operation for operation (float64,
-- microseconds), so both stores compute the same values. Joined after
-- prelude.lua and leased.lua (key, now, ttl, ms, lf, pf, cf, holder, the
-- loan helpers).
--
-- KEYS[1]  hash {t = tokens (fractional), u = time of that level, unix µs,
--          '@'..holder = loans}
-- ARGV     limit, period_us, capacity, holder, want, need, held, ttl_us, idle_us,
--          spent_before
-- returns  {granted, remaining, wait_ms, reset_ms, lent}
--
-- An absent key is a full bucket. The refill is capped by the loans. The
-- key is written when tokens are granted, or when the holder has a running
-- loan (every call settles it, see split), and expires when the bucket
-- would be full again with every loan ended.
local want, need = tonumber(ARGV[5]), tonumber(ARGV[6])
local held, ttl_us, idle_us = tonumber(ARGV[7]), tonumber(ARGV[8]), tonumber(ARGV[9])
local spent_before = tonumber(ARGV[10])

local st, ls = read()
local tokens, updated = cf, 0
local t = now
if st.t then
  updated = tonumber(st.u)
  local elapsed = now - updated
  if elapsed < 0 then elapsed = 0 end
  t = math.max(now, updated)
end
local sp = split(ls, held, idle_us, spent_before, t)
if st.t then
  tokens = cap_level(effective(ls, sp, t), math.min(cf, tonumber(st.t) + math.max(now - updated, 0) * lf / pf), t)
end
local avail = math.floor(tokens)

local granted, wait = 0, 0
if need > cf then
  wait = pf
elseif avail >= need then
  granted = math.min(want, avail)
else
  wait = (need - tokens) * pf / lf
end
if granted > 0 or (sp.i and ls[sp.i].exp > t) then
  -- Every call of a holder with a loan settles it: the level it saw (its
  -- spent tokens credited from when they were spent) is written, so that
  -- the credit holds whatever later calls say.
  local keep = keep_of(ls, sp, t, granted)
  tokens = tokens - granted
  updated = t
  ls = settle(prune(ls, updated), keep, granted, updated, ttl_us, idle_us, false)
  local d = full_in(ls, (cf - tokens) * pf / lf, updated)
  write({'t', fmt(tokens), 'u', fmt(updated)}, ls, ttl(updated - now + d))
end
return {granted, math.floor(tokens), ms(wait), ms((cf - tokens) * pf / lf), lent_to(ls, holder, now)}
