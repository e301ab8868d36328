-- gcra return: holder's loan ends; TAT = max(now, max(TAT, now) -
-- floor(n'*P/L)), n' = min(n, lent); the rest of the loan counts as spent
-- now (an ended loan).
-- Mirrors lease.GCRAState.Return. Joined after prelude.lua and leased.lua.
--
-- KEYS[1]  string (see gcra_lease.lua)
-- ARGV     limit, period_us, capacity, holder, tokens
-- returns  the tokens given back
local n = ARGV[5] + 0
local H = loans()
local st, ls = H.read(redis.call('GET', key), 'gc')
local tat = st.t
if not tat or n < 0 then
  return 0
end
if H.lent_to(ls, holder, now) == 0 then
  return 0 -- nothing lent to holder: nothing comes back, nothing changes
end
local back
ls, back = H.end_loan(ls, n, now)
ls = H.retire(ls, now)
tat = H.tat_back(tat, back, now)
ls, tat = H.trim(ls, now, 'gc', tat)
if tat <= now and #ls == 0 then
  redis.call('DEL', key) -- full and nothing lent: the same as no state
  return back
end
H.write(head('gc', tat, 0, 0), ls, tat, false, ttl(H.spent_by(ls, tat) - now))
return back
