-- gcra return: holder's loan ends; TAT = max(now, base - floor(n'*P/L)),
-- n' = min(n, lent), base = the TAT with the loans' floor applied.
-- Mirrors lease.GCRAState.Return. Joined after prelude.lua and leased.lua.
--
-- KEYS[1]  hash {t = TAT, '@'..holder = loans} (see gcra_lease.lua)
-- ARGV     limit, period_us, capacity, holder, tokens
-- returns  the tokens given back
local n = tonumber(ARGV[5])
local st, ls = read()
local tat = tonumber(st.t)
if not tat or n < 0 then
  return 0
end
if lent_to(ls, holder, now) == 0 then
  return 0 -- nothing lent to holder: nothing comes back, nothing changes
end
local base = math.max(tat, now, floor_tat(ls, now))
local back
ls, back = take(prune(ls, now), n)
if back > 0 then
  base = base - math.min(math.floor(back * pf / lf), base - now)
end
tat = base
if tat <= now and #ls == 0 then
  redis.call('DEL', key) -- full and nothing lent: the same as no state
  return back
end
local e = tat
for _, l in ipairs(ls) do
  e = math.max(e, l.exp + math.ceil(after(ls, l.exp) * pf / lf))
end
write({'t', string.format('%d', tat)}, ls, ttl(e - now))
return back
