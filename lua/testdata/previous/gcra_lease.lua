-- gcra lease: one theoretical arrival time (TAT). Mirrors
-- lease.GCRAState.Lease operation for operation (microseconds): with
-- base = max(TAT, now, floor) (floor: the loans' lowest TAT) and d = base
-- - now, avail = floor(B - d*L/P); a grant of g sets TAT = base +
-- ceil(g*P/L); Wait = d - (B - need)*P/L; Reset = TAT_after - now. (The
-- package doc's T = P/L and tau = B*T, multiplied out.) Policy validation
-- keeps B*P/L ≤ 2^52 µs, so the TAT stays an exact integer. Joined after
-- prelude.lua and leased.lua.
--
-- KEYS[1]  string {t = TAT in unix µs (an integer), '@'..holder = loans, '#' = the
--          last call (see last_call)}
-- ARGV     limit, period_us, capacity (burst), holder, want, need, held, ttl_us, idle_us,
--          spent_before, call, unanswered
-- returns  {granted, remaining, wait_ms, reset_ms, lent}
--
-- An absent key (or a TAT not after now, with no loans) is a full bucket.
-- The key is written when tokens are granted, or when the holder has a
-- running loan (every call settles it, see split), and expires when the
-- TAT and every loan's tokens are past.
local want, need = tonumber(ARGV[5]), tonumber(ARGV[6])
local held, ttl_us, idle_us = tonumber(ARGV[7]), tonumber(ARGV[8]), tonumber(ARGV[9])
local spent_before, call, unans = tonumber(ARGV[10]), tonumber(ARGV[11]), tonumber(ARGV[12])
local bf = cf

local function avail(d)
  local a = math.floor(bf - d * lf / pf)
  if a < 0 then return 0 end
  return a
end

local st, ls = read()
local tat = tonumber(st.t) or 0
local last_c, last_g = last_call(st)
local back = unanswered(ls, unans, last_c, last_g, now)
if back > 0 then
  -- Granted by a call whose answer the holder never got: the TAT moves
  -- back as a return moves it.
  tat = tat_back(tat, back, now)
end
local sp = split(ls, held, idle_us, spent_before, now)
local base = math.max(tat, now, floor_tat(effective(ls, sp, now), now))
local d = base - now
local a = avail(d)

local granted, wait = 0, 0
if need > bf then
  wait = pf
elseif a >= need then
  granted = math.min(want, a)
else
  wait = d - (bf - need) * pf / lf
end
if granted > 0 or (sp.i and ls[sp.i].exp > now) then
  -- Every call of a holder with a loan settles it. The stored TAT is the
  -- grants' (see token_bucket_lease.lua): the loans' floors apply when
  -- read.
  local keep = keep_of(ls, sp, now, granted)
  local cost = math.ceil(granted * pf / lf)
  tat = math.max(tat, now) + cost
  ls = settle(retire(settling(ls, sp, now, granted > 0), now), keep, granted, now, ttl_us, idle_us, false)
  local function floor(l, a) return l.exp + math.ceil(a * pf / lf) end
  ls = trim(ls, function(l, a) return floor(l, a) > now end,
    function(l, a) tat = math.max(tat, floor(l, a)) end)
  d = base + cost - now
  -- The key expires at the later of the TAT and each loan's expiry plus
  -- its tokens' worth.
  local e = tat
  for _, l in ipairs(ls) do
    e = math.max(e, l.exp + math.ceil(after(ls, l.exp) * pf / lf))
  end
  write(last_field({'t', tat}, call, granted), ls, ttl(e - now))
end
return {granted, avail(d), ms(wait), ms(d), lent_to(ls, holder, now)}
