-- token_bucket lease: refill, then grant min(want, avail) if avail >= need.
-- Mirrors lease.TokenBucketState.Lease operation for operation (float64,
-- microseconds), so both stores compute the same values. Joined after
-- prelude.lua and leased.lua (key, now, ttl, ms, lf, pf, cf, holder, the
-- loan helpers).
--
-- KEYS[1]  string {t = tokens (fractional), u = time of that level, unix µs,
--          '@'..holder = loans, '#' = the last call (see last_call)}
-- ARGV     limit, period_us, capacity, holder, want, need, held, ttl_us, idle_us,
--          spent_before, call, unanswered
-- returns  {granted, remaining, wait_ms, reset_ms, lent}
--
-- An absent key is a full bucket. The stored level is the refill less the
-- grants, capped when read by the loans (running, and ended ones while
-- they still cap it). The key is written when tokens are granted, or when
-- the holder has a running loan (every call settles it, see split), and
-- expires when the bucket would be full again with every loan ended.
local want, need = tonumber(ARGV[5]), tonumber(ARGV[6])
local held, ttl_us, idle_us = tonumber(ARGV[7]), tonumber(ARGV[8]), tonumber(ARGV[9])
local spent_before, call, unans = tonumber(ARGV[10]), tonumber(ARGV[11]), tonumber(ARGV[12])

local st, ls = read()
local raw, updated = cf, 0
local t = now
if st.t then
  updated = tonumber(st.u)
  local elapsed = now - updated
  if elapsed < 0 then elapsed = 0 end
  raw = math.min(cf, tonumber(st.t) + elapsed * lf / pf)
  t = math.max(now, updated)
end
local last_c, last_g = last_call(st)
local back = unanswered(ls, unans, last_c, last_g, t)
if back > 0 then
  -- Granted by a call whose answer the holder never got: back to the
  -- level, as a return gives them (at most C).
  raw = math.min(cf, raw + back)
end
local sp = split(ls, held, idle_us, spent_before, t)
local tokens = raw
if st.t then
  tokens = cap_level(effective(ls, sp, t), raw, t)
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
  -- Every call of a holder with a loan settles it. The stored level is
  -- the refill less the grants: the running loans cap it when read, the
  -- ended ones too until trim drops them (or bakes their cap in).
  local keep = keep_of(ls, sp, t, granted)
  tokens = tokens - granted
  local stored = raw - granted
  ls = settle(retire(settling(ls, sp, t, granted > 0), t), keep, granted, t, ttl_us, idle_us, false)
  local function cap(l, a) return cf - a + (t - l.exp) * lf / pf end
  ls = trim(ls, function(l, a) return cap(l, a) < cf end,
    function(l, a) stored = math.min(stored, cap(l, a)) end)
  local d = full_in(ls, (cf - stored) * pf / lf, t)
  write(last_field({'t', stored, 'u', t}, call, granted), ls, ttl(t - now + d))
end
return {granted, math.floor(tokens), ms(wait), ms((cf - tokens) * pf / lf), lent_to(ls, holder, now)}
