-- gcra return: holder's loan ends; TAT = max(now, max(TAT, now) -
-- floor(n'*P/L)), n' = min(n, lent); the rest of the loan counts as spent
-- now (an ended loan).
-- Mirrors lease.GCRAState.Return. Joined after prelude.lua and leased.lua.
--
-- KEYS[1]  string (see gcra_lease.lua)
-- ARGV     limit, period_us, capacity, holder, tokens
-- returns  the tokens given back
local n = tonumber(ARGV[5])
loans()
local st, ls = read(redis.call('GET', key), 'gc')
local tat = tonumber(st.t)
if not tat or n < 0 then
  return 0
end
if lent_to(ls, holder, now) == 0 then
  return 0 -- nothing lent to holder: nothing comes back, nothing changes
end
local back
ls, back = end_loan(ls, n, now)
ls = retire(ls, now)
tat = tat_back(tat, back, now)
local function floor(l, a) return l.exp + math.ceil(a * pf / lf) end
ls = trim(ls, function(l, a) return floor(l, a) > now end,
  function(l, a) tat = math.max(tat, floor(l, a)) end)
if tat <= now and #ls == 0 then
  redis.call('DEL', key) -- full and nothing lent: the same as no state
  return back
end
local e = tat
for _, l in ipairs(ls) do
  e = math.max(e, l.exp + math.ceil(after(ls, l.exp) * pf / lf))
end
write(head_gc(tat, 0, 0), ls, tat, false, ttl(e - now))
return back
