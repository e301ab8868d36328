-- gcra lease: one theoretical arrival time (TAT). Mirrors
-- lease.GCRAState.Lease operation for operation (microseconds): with
-- base = max(TAT, now, floor) (floor: the loans' lowest TAT) and d = base
-- - now, avail = floor(B - d*L/P); a grant of g sets TAT = base +
-- ceil(g*P/L); Wait = d - (B - need)*P/L; Reset = TAT_after - now. (The
-- package doc's T = P/L and tau = B*T, multiplied out.) Policy validation
-- keeps B*P/L ≤ 2^52 µs, so the TAT stays an exact integer. Joined after
-- prelude.lua and leased.lua.
--
-- KEYS[1]  string: 't' = TAT in unix µs (an integer), '#' and '$' = the
--          last call and its grant, loans (see leased.lua)
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

local fast = true -- false: every call takes the general path (tests)
local v = redis.call('GET', key)

-- fast_path answers the common states with locals only: no state, or
-- state whose only loan is the caller's, running, and which the caller
-- still holds whole (see token_bucket_lease.lua). It is the general path
-- below, operation for operation, for those states, and writes the same
-- bytes; nil: any other state, for the general path.
local function fast_path()
  local tat, lc, lg = 0, 0, 0
  local lent, exp, last = nil, 0, 0 -- the caller's loan
  if v then
    local h, pos
    h, tat, pos = struct.unpack('<BI7', v)
    if h % 2 == 1 then lc, lg, pos = struct.unpack('<I4' .. W[math.floor(h / 2) % 4], v, pos) end
    if pos <= #v then
      local kind = string.byte(v, pos)
      if kind < 64 or holder == '' then return nil end
      local id, d1, d2
      local f = '<c8' .. W[kind % 4] .. W[math.floor(kind / 4) % 4]
      if kind >= 128 then
        id, lent, d1, d2, pos = struct.unpack(f .. W[math.floor(kind / 16) % 4], v, pos + 1)
        last = tat - unzz(d2)
      else
        id, lent, d1, pos = struct.unpack(f, v, pos + 1)
      end
      if id ~= holder or pos <= #v then return nil end
      exp = tat + unzz(d1)
    end
  end
  local fl = 0 -- floor_tat
  if lent then
    if exp <= now then return nil end -- it ended: retire
    if unans ~= 0 and lc == unans then
      local back = math.min(lg, lent)
      lent = lent - back
      if back > 0 then -- tat_back
        local b = math.max(tat, now)
        tat = b - math.min(math.floor(back * pf / lf), b - now)
      end
    end
    if held < lent then return nil end -- split: spent tokens
    fl = math.max(fl, now + math.ceil(lent * pf / lf))
  end
  local base = math.max(tat, now, fl)
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
  local lent_now = 0
  if granted > 0 or lent then
    local cost = math.ceil(granted * pf / lf)
    tat = math.max(tat, now) + cost
    local nl, ne = (lent or 0) + granted, now + ttl_us
    if lent then ne = math.max(ne, exp) end
    d = base + cost - now
    local e, loan = tat, ''
    if holder ~= '' and nl > 0 then
      loan = pack_loan(holder, nl, ne, now - idle_us, tat, false)
      e = math.max(e, ne + math.ceil(nl * pf / lf))
      if ne > now then lent_now = nl end
    end
    redis.call('SET', key, head_gc(tat, last_of(call, granted)) .. loan, 'PX', ttl(e - now))
  end
  return {granted, avail(d), ms(wait), ms(d), lent_now}
end
if fast then
  local r = fast_path()
  if r then return r end
end

loans()
local st, ls = read(v, 'gc')
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
  write(head_gc(tat, last_of(call, granted)), ls, tat, false, ttl(e - now))
end
return {granted, avail(d), ms(wait), ms(d), lent_to(ls, holder, now)}
