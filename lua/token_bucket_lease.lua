-- token_bucket lease: refill, then grant min(want, avail) if avail >= need.
-- Mirrors lease.TokenBucketState.Lease operation for operation (float64,
-- microseconds), so both stores compute the same values. Joined after
-- prelude.lua and leased.lua (key, now, ttl, ms, lf, pf, cf, holder, the
-- loan helpers).
--
-- KEYS[1]  hash {t = tokens (fractional), u = time of that level, unix µs,
--          '@'..holder = loans}
-- ARGV     limit, period_us, capacity, holder, want, need, held, ttl_us, idle_us
-- returns  {granted, remaining, wait_ms, reset_ms, lent}
--
-- An absent key is a full bucket. The refill is capped by the loans. The
-- key is written when tokens are granted, or when the holder has a running
-- loan (any call settles and renews it), and expires when
-- the bucket would be full again with every loan ended.
local want, need = tonumber(ARGV[5]), tonumber(ARGV[6])
local held, ttl_us, idle_us = tonumber(ARGV[7]), tonumber(ARGV[8]), tonumber(ARGV[9])

local st, ls = read()
local tokens, updated = cf, 0
if st.t then
  updated = tonumber(st.u)
  local elapsed = now - updated
  if elapsed < 0 then elapsed = 0 end
  local t = math.max(now, updated)
  tokens = cap_level(effective(ls, held, idle_us, t), math.min(cf, tonumber(st.t) + elapsed * lf / pf), t)
end
local avail = math.floor(tokens)

-- save writes level tk at time up and the loans; the key expires when
-- full with every loan ended.
local function save(tk, up)
  local d = full_in(ls, (cf - tk) * pf / lf, up)
  write({'t', fmt(tk), 'u', fmt(up)}, ls, ttl(up - now + d))
end

local granted, wait = 0, 0
if need > cf then
  wait = pf
elseif avail >= need then
  granted = math.min(want, avail)
  if granted > 0 then
    tokens = tokens - granted
    updated = math.max(updated, now)
    ls = settle(prune(ls, updated), held, granted, updated, ttl_us, false)
    save(tokens, updated)
  end
else
  wait = (need - tokens) * pf / lf
end
if granted == 0 and lent_to(ls, holder, now) > 0 then
  -- A call that grants nothing settles the holder's loan too: the level
  -- it saw is written at now, the loan becomes min(lent, held), renewed.
  updated = math.max(updated, now)
  ls = settle(prune(ls, updated), held, 0, updated, ttl_us, false)
  save(tokens, updated)
end
return {granted, math.floor(tokens), ms(wait), ms((cf - tokens) * pf / lf), lent_to(ls, holder, now)}
