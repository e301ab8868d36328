-- token_bucket return: holder's loan ends; tokens = min(capacity, stored
-- level refilled + min(n, lent)), the rest of the loan counts as spent now
-- (an ended loan). Mirrors lease.TokenBucketState.Return. Joined after
-- prelude.lua and leased.lua.
--
-- KEYS[1]  string (see token_bucket_lease.lua)
-- ARGV     limit, period_us, capacity, holder, tokens
-- returns  the tokens given back
local n = ARGV[5] + 0
local H = loans()
local st, ls = H.read(redis.call('GET', key), 'tb')
if not st.t or n < 0 then
  return 0
end
if H.lent_to(ls, holder, math.max(st.u, now)) == 0 then
  return 0 -- nothing lent to holder: nothing comes back, nothing changes
end
local updated = st.u
local elapsed = now - updated
if elapsed < 0 then elapsed = 0 end
local raw = math.min(cf, st.t + elapsed * lf / pf)
updated = math.max(updated, now)
local back
ls, back = H.end_loan(ls, n, updated)
ls = H.retire(ls, updated)
local tokens = math.min(cf, raw + back)
ls, tokens = H.trim(ls, updated, 'tb', tokens)
if tokens >= cf and #ls == 0 then
  redis.call('DEL', key) -- full and nothing lent: the same as no state
  return back
end
local d = H.full_in(ls, (cf - tokens) * pf / lf, updated)
H.write(head('tb', tokens, updated, 0, 0), ls, updated, false, ttl(updated - now + d))
return back
