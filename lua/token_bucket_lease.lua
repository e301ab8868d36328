-- token_bucket lease: refill, then grant min(want, avail) if avail >= need.
-- Mirrors lease.TokenBucketState.Lease operation for operation (float64,
-- microseconds), so both stores compute the same values. Joined after
-- prelude.lua and leased.lua (key, now, ttl, ms, lf, pf, cf, holder, the
-- loan helpers).
--
-- KEYS[1]  string: 't' = tokens (fractional), 'u' = time of that level,
--          unix µs, '#' and '$' = the last call and its grant, loans (see
--          leased.lua)
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

local fast = true -- false: every call takes the general path (tests)
local v = redis.call('GET', key)

-- fast_path answers the common states with locals only: no state, or
-- state whose only loan is the caller's, running, and which the caller
-- still holds whole (Held ≥ lent: nothing reported spent, so no ended
-- loan comes of the call). It is the general path below, operation for
-- operation, for those states, and writes the same bytes; nil: any other
-- state, for the general path.
local function fast_path()
  local raw, t, lc, lg = cf, now, 0, 0
  local lent, exp, last = nil, 0, 0 -- the caller's loan
  if v then
    local h, lvl, u, pos = struct.unpack('<BdI7', v)
    if h % 2 == 1 then lc, lg, pos = struct.unpack('<I4' .. W[math.floor(h / 2) % 4], v, pos) end
    if pos <= #v then
      local kind = string.byte(v, pos)
      if kind < 64 or holder == '' then return nil end
      local id, d1, d2
      local f = '<c8' .. W[kind % 4] .. W[math.floor(kind / 4) % 4]
      if kind >= 128 then
        id, lent, d1, d2, pos = struct.unpack(f .. W[math.floor(kind / 16) % 4], v, pos + 1)
        last = u - unzz(d2)
      else
        id, lent, d1, pos = struct.unpack(f, v, pos + 1)
      end
      if id ~= holder or pos <= #v then return nil end
      exp = u + unzz(d1)
    end
    local elapsed = now - u
    if elapsed < 0 then elapsed = 0 end
    raw = math.min(cf, lvl + elapsed * lf / pf)
    t = math.max(now, u)
  end
  if lent then
    if exp <= t then return nil end -- it ended: retire
    if unans ~= 0 and lc == unans then
      local back = math.min(lg, lent)
      lent = lent - back
      if back > 0 then raw = math.min(cf, raw + back) end
    end
    if held < lent then return nil end -- split: spent tokens
  end
  local tokens = raw
  if lent then tokens = math.min(raw, cf - lent + (t - t) * lf / pf) end
  local avail = math.floor(tokens)
  local granted, wait = 0, 0
  if need > cf then
    wait = pf
  elseif avail >= need then
    granted = math.min(want, avail)
  else
    wait = (need - tokens) * pf / lf
  end
  local lent_now = 0
  if granted > 0 or lent then
    tokens = tokens - granted
    local stored = raw - granted
    local nl, ne = (lent or 0) + granted, t + ttl_us
    if lent then ne = math.max(ne, exp) end
    local loan = ''
    local d = (cf - stored) * pf / lf
    if holder ~= '' and nl > 0 then
      loan = pack_loan(holder, nl, ne, t - idle_us, t, false)
      d = math.max(d, (ne - t) + nl * pf / lf)
      if ne > now then lent_now = nl end
    end
    redis.call('SET', key, head_tb(stored, t, last_of(call, granted)) .. loan, 'PX', ttl(t - now + d))
  end
  return {granted, math.floor(tokens), ms(wait), ms((cf - tokens) * pf / lf), lent_now}
end
if fast then
  local r = fast_path()
  if r then return r end
end

loans()
local st, ls = read(v, 'tb')
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
  write(head_tb(stored, t, last_of(call, granted)), ls, t, false, ttl(t - now + d))
end
return {granted, math.floor(tokens), ms(wait), ms((cf - tokens) * pf / lf), lent_to(ls, holder, now)}
