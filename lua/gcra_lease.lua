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
--          spent_before, call, unanswered, max_holders
-- returns  {granted, remaining, wait_ms, reset_ms, lent, crowded}
--
-- An absent key (or a TAT not after now, with no loans) is a full bucket.
-- The key is written when tokens are granted, or when the holder has a
-- running loan (every call settles it, see split), and expires when the
-- TAT and every loan's tokens are past. A holder without a running loan,
-- when max_holders (> 0) holders have one, is crowded out (see
-- token_bucket_lease.lua).
local want, need = ARGV[5] + 0, ARGV[6] + 0
local held, ttl_us, idle_us = ARGV[7] + 0, ARGV[8] + 0, ARGV[9] + 0
local spent_before, call, unans = ARGV[10] + 0, ARGV[11] + 0, ARGV[12] + 0
local maxh = ARGV[13] + 0
local bf, ceil = cf, math.ceil

local function avail(d)
  local a = math.floor(bf - d * lf / pf)
  if a < 0 then return 0 end
  return a
end

local fast = true -- false: every call takes the general path (tests)
local v = redis.call('GET', key)

-- The fast path answers the states with no other holder: no state, or
-- state whose running loans are the caller's alone, its loan first and
-- any ended loans after it, by expiry (see token_bucket_lease.lua). It is
-- the general path below, operation for operation, for those states, and
-- writes the same bytes; any other state breaks out to the general path.
repeat -- the fast path (break: the general path)
  if not fast then break end
  local tat, lc, lg = 0, 0, 0
  local lent, exp, last = nil, 0, 0 -- the caller's loan
  local el, n = nil, 0 -- the ended loans after it: n of them
  if v then
    local h, pos
    h, tat, pos = struct.unpack('<BI7', v)
    if h % 2 == 1 then lc, lg, pos = struct.unpack('<I4' .. W[(h - h % 2) / 2 % 4], v, pos) end
    local size = #v
    if pos <= size then
      local kind = string.byte(v, pos)
      if kind < 64 or holder == '' then break end
      local id, d1, d2
      local k4 = (kind - kind % 4) / 4 -- the width codes, without math.floor
      local f = '<c8' .. W[kind % 4] .. W[k4 % 4]
      if kind >= 128 then
        id, lent, d1, d2, pos = struct.unpack(f .. W[(k4 - k4 % 4) / 4 % 4], v, pos + 1)
        if d2 % 2 == 0 then last = tat - d2 / 2 else last = tat + (d2 + 1) / 2 end
      else
        id, lent, d1, pos = struct.unpack(f, v, pos + 1)
      end
      if id ~= holder then break end
      if d1 % 2 == 0 then exp = tat + d1 / 2 else exp = tat - (d1 + 1) / 2 end
      if pos <= size then el = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0} end -- five loans without a rehash
      while pos <= size do
        kind = string.byte(v, pos)
        if kind >= 64 then break end -- another holder's loan
        local a, x
        a, x, pos = struct.unpack('<' .. W[kind % 4] .. W[(kind - kind % 4) / 4 % 4], v, pos + 1)
        if x % 2 == 0 then x = tat + x / 2 else x = tat - (x + 1) / 2 end
        if n > 0 and x > el[2 * n] then
          pos = 0 -- not by expiry (an older release wrote it): the general path sorts them
          break
        end
        el[2 * n + 1], el[2 * n + 2] = a, x
        n = n + 1
      end
      if pos <= size then break end
    end
  end
  local fl = 0 -- floor_tat
  local run, early, late, early_at, late_at = 0, 0, 0, 0, 0
  if lent then
    if exp <= now then break end -- it ended: retire
    if unans ~= 0 and lc == unans then
      local back = math.min(lg, lent)
      lent = lent - back
      if back > 0 then -- tat_back
        local b = math.max(tat, now)
        tat = b - math.min(math.floor(back * pf / lf), b - now)
      end
    end
    -- split
    run = lent
    if held < run then run = held end
    early = lent - run
    if spent_before < early then early = spent_before end
    late = lent - run - early
    late_at = now - idle_us
    early_at = late_at
    if last > 0 and last < late_at then early_at = last end
    -- effective (see token_bucket_lease.lua), then floor_tat over the
    -- loan, the ended and the parts spent before now
    local r, e1, x1, e2, x2 = run, 0, 0, 0, 0
    if early == 0 then
      -- nothing
    elseif early_at < now then
      e1, x1 = early, early_at
    else
      r = r + early
    end
    if late == 0 then
      -- nothing
    elseif late_at < now then
      e2, x2 = late, late_at
    else
      r = r + late
    end
    for i = -2, n do
      local x = exp
      if i == -1 then x = x1 elseif i == 0 then x = x2 elseif i > 0 then x = el[2 * i] end
      if i < -1 or i > 0 or (i == -1 and e1 > 0) or (i == 0 and e2 > 0) then
        local a = 0 -- after: A(x) over the effective loans
        if exp >= x then a = r end
        if e1 > 0 and x1 >= x then a = a + e1 end
        if e2 > 0 and x2 >= x then a = a + e2 end
        for k = 2, 2 * n, 2 do
          if el[k] >= x then a = a + el[k - 1] end
        end
        local s = x
        if now < s then s = now end
        local c = s + math.ceil(a * pf / lf)
        if c > fl then fl = c end
      end
    end
  end
  local base = math.max(tat, now, fl)
  local d = base - now
  local a = avail(d)
  local granted, wait = 0, 0
  if need > bf then
    wait = pf
  elseif a >= need then
    granted = want
    if a < want then granted = a end
  else
    wait = d - (bf - need) * pf / lf
  end
  local lent_now = 0
  if granted > 0 or lent then
    local cost = math.ceil(granted * pf / lf)
    tat = math.max(tat, now) + cost
    -- settling and settle (see token_bucket_lease.lua)
    local nl, ne = granted, now + ttl_us
    if lent then
      nl = run + granted
      if exp > ne then ne = exp end
      local a2 = 0 -- late, after a grant
      if late > 0 and granted > 0 then a2 = late elseif late > 0 then nl = nl + late end
      for i = 1, 2 do
        local p, x = early, early_at
        if i == 2 then p, x = a2, late_at end
        if p > 0 then
          if x > now then x = now end
          if not el then el = {0, 0, 0, 0} end
          local j = n -- insert: after the ended loans of its time
          while j > 0 and el[2 * j] < x do
            el[2 * j + 1], el[2 * j + 2] = el[2 * j - 1], el[2 * j]
            j = j - 1
          end
          el[2 * j + 1], el[2 * j + 2] = p, x
          n = n + 1
        end
      end
      if nl == 0 and n > 0 then break end -- the loan goes
    end
    -- trim: merge the ended loans of one time (neighbours), then drop (or
    -- past max_ended bake into the TAT) the oldest, the last, while it
    -- floors nothing; its A(E) is what all the loans lend
    local m, s = 0, nl
    for k = 1, n do
      if m > 0 and el[2 * m] == el[2 * k] then
        el[2 * m - 1] = el[2 * m - 1] + el[2 * k - 1]
      else
        m = m + 1
        el[2 * m - 1], el[2 * m] = el[2 * k - 1], el[2 * k]
      end
      s = s + el[2 * k - 1]
    end
    n = m
    while n > 0 do
      local c = el[2 * n] + math.ceil(s * pf / lf)
      if c > now then
        if n <= max_ended then break end
        tat = math.max(tat, c)
      end
      s = s - el[2 * n - 1]
      n = n - 1
    end
    d = base + cost - now
    -- spent_by, a running sum by expiry, and write
    local e = tat
    local parts = {head('gc', tat, last_of(call, granted, lc, lg))}
    s = 0
    if holder ~= '' and nl > 0 then
      s = nl
      local c = ne + math.ceil(s * pf / lf)
      if c > e then e = c end
      parts[2] = pack_loan(holder, nl, ne, now - idle_us, tat, false)
      if ne > now then lent_now = nl end
    end
    for k = 1, n do
      local x = el[2 * k]
      s = s + el[2 * k - 1]
      local c = x + math.ceil(s * pf / lf)
      if c > e then e = c end
      parts[#parts + 1] = pack_loan('', el[2 * k - 1], x, 0, tat, false)
    end
    redis.call('SET', key, table.concat(parts), 'PX', ttl(e - now))
  end
  return {granted, avail(d), ms(wait), ms(d), lent_now, 0}
until true

-- The general path: lease/algo/loans.go operation for operation, with the
-- loan helpers written out inline (see token_bucket_lease.lua).
local function rise(l, b, id, lent, exp, last)
  while b > 0 and l[b - 1] < exp do
    l[b + 1], l[b + 2], l[b + 3], l[b + 4] = l[b - 3], l[b - 2], l[b - 1], l[b]
    b = b - 4
  end
  l[b + 1], l[b + 2], l[b + 3], l[b + 4] = id, lent, exp, last
  return b
end

-- read: the loans, the caller's (si) and how many holders' loans run (nh)
local read_loans, write_loans = refill()
local ls, tat, last_c, last_g, si, nh = {}, 0, 0, 0, nil, 0
if v then
  local h, pos
  h, tat, pos = struct.unpack('<BI7', v)
  if h % 2 == 1 then last_c, last_g, pos = struct.unpack('<I4' .. W[(h - h % 2) / 2 % 4], v, pos) end
  ls, si, nh = read_loans(v, pos, tat, now)
end
-- crowd (see token_bucket_lease.lua)
local crowded = 0
if holder ~= '' and maxh > 0 and nh >= maxh and not (si and ls[si + 3] > now) then
  crowded, holder, si, want = 1, '', nil, need
end
-- unanswered
if unans ~= 0 and si and last_c == unans and ls[si + 3] > now then
  local back = math.min(last_g, ls[si + 2])
  ls[si + 2] = ls[si + 2] - back
  if back > 0 then
    -- Granted by a call whose answer the holder never got: the TAT moves
    -- back as a return moves it (tat_back).
    local b = math.max(tat, now)
    tat = b - math.min(math.floor(back * pf / lf), b - now)
  end
end
-- split
local run, early, late, early_at, late_at = 0, 0, 0, 0, 0
if si then
  local lent = ls[si + 2]
  -- (math.min and math.max written out on the common steps: a C call
  -- each saved)
  run = lent
  if held < lent then run = held end
  early = spent_before
  if lent - run < early then early = lent - run end
  late = lent - run - early
  late_at = now - idle_us
  early_at = late_at
  if ls[si + 4] > 0 and ls[si + 4] < late_at then early_at = ls[si + 4] end
end
-- effective (see token_bucket_lease.lua)
local r, a1, x1, a2, x2 = 0, 0, 0, 0, 0
if si then
  r = ls[si + 2]
  if run ~= r then
    local e = ls[si + 3]
    if now < e then e = now end
    r = run
    if early == 0 then
      -- nothing
    elseif early_at < e then
      a2, x2 = early, early_at
    else
      r = r + early
    end
    if late == 0 then
      -- nothing
    elseif late_at < e then
      a1, x1 = late, late_at
    else
      r = r + late
    end
  end
end
-- floor_tat: min(x, now) + ceil(A(x)*P/L) at each time x, A(x) a running
-- sum by expiry. Those at or after now floor at now + ceil(A(x)*P/L),
-- most at the last of them: one sum. Then each time before now, the
-- parts' among them.
local fl, total = 0, 0 -- total: what the loans lend
do
  local a, b, m = 0, 0, #ls
  while b < m and ls[b + 3] >= now do
    if b == si then a = a + r else a = a + ls[b + 2] end
    b = b + 4
  end
  if b > 0 then fl = now + ceil(a * pf / lf) end
  while true do
    local x = nil
    if b < m then x = ls[b + 3] end
    if a1 > 0 and (not x or x1 > x) then x = x1 end
    if a2 > 0 and (not x or x2 > x) then x = x2 end
    if not x then break end
    while b < m and ls[b + 3] == x do
      if b == si then a = a + r else a = a + ls[b + 2] end
      b = b + 4
    end
    if a1 > 0 and x1 == x then a, a1 = a + a1, 0 end
    if a2 > 0 and x2 == x then a, a2 = a + a2, 0 end
    local c = x + ceil(a * pf / lf)
    if c > fl then fl = c end
  end
  total = a -- the effective loans lend what the loans do
end
local base = math.max(tat, now, fl)
local d = base - now
local a = avail(d)

local granted, wait = 0, 0
if need > bf then
  wait = pf
elseif a >= need then
  granted = want
  if a < want then granted = a end
else
  wait = d - (bf - need) * pf / lf
end
local lent = 0 -- what the caller is lent after the call
if granted > 0 or (si and ls[si + 3] > now) then
  -- Every call of a holder with a loan settles it. The stored TAT is the
  -- grants' (see token_bucket_lease.lua): the loans' floors apply when
  -- read.
  -- keep
  local running = si and ls[si + 3] > now
  local keep = 0
  if running then
    if granted > 0 then keep = run else keep = run + late end
  end
  local cost = math.ceil(granted * pf / lf)
  -- A grant without a holder lends nothing: it moves the TAT on from
  -- the floor (see lease.GCRAState.Lease).
  if holder ~= '' then tat = math.max(tat, now) + cost else tat = base + cost end
  -- settling (see token_bucket_lease.lua)
  if si and run ~= ls[si + 2] then
    local exp = ls[si + 3]
    local e = exp
    if now < e then e = now end
    ls[si + 2] = run
    if early > 0 then rise(ls, #ls, '', early, math.min(early_at, e), 0) end
    if late == 0 then
      -- nothing
    elseif granted > 0 or exp <= now then
      rise(ls, #ls, '', late, math.min(late_at, e), 0)
    else
      ls[si + 2] = ls[si + 2] + late -- kept lent
    end
  end
  -- settle (see token_bucket_lease.lua)
  local skip, vl, vx, vlast = nil, 0, 0, 0
  if holder ~= '' then
    local lent, exp, last = keep + granted, now + ttl_us, now - idle_us
    if running and ls[si + 3] > exp then exp = ls[si + 3] end
    if running then skip, total = si, total - ls[si + 2] end
    if lent > 0 then vl, vx, vlast, total = lent, exp, last, total + lent end
  end
  -- retire and trim (see token_bucket_lease.lua): the oldest's floor is
  -- E + ceil(A(E)*P/L)
  local f = #ls
  while f > 0 and ls[f - 1] <= now do
    f = f - 4
  end
  local w, s, n = f, total, 0 -- w: the base after the loans kept
  for b = f, #ls - 4, 4 do
    local lent, x = ls[b + 2], ls[b + 3]
    if w > f and ls[w - 1] == x then
      ls[w - 2] = ls[w - 2] + lent
    else
      ls[w + 1], ls[w + 2], ls[w + 3], ls[w + 4], n = '', lent, x, 0, n + 1
      w = w + 4
    end
  end
  for k = #ls, w + 1, -1 do
    ls[k] = nil
  end
  while n > 0 do
    local b = w - 4
    local c = ls[b + 3] + ceil(s * pf / lf)
    if c > now then
      if n <= max_ended then break end
      tat = math.max(tat, c)
    end
    s = s - ls[b + 2]
    ls[b + 4], ls[b + 3], ls[b + 2], ls[b + 1] = nil, nil, nil, nil
    w, n = b, n - 1
  end
  d = base + cost - now
  -- The key expires at the later of the TAT and each loan's expiry plus
  -- its tokens' worth (spent_by), a running sum by expiry, as the loans
  -- are written.
  local parts = {head('gc', tat, last_of(call, granted, last_c, last_g))}
  local e = write_loans(parts, ls, w, skip, holder, vl, vx, vlast, tat, now, 'gc', tat)
  redis.call('SET', key, table.concat(parts), 'PX', ttl(e - now))
  lent = vl -- expiring after now
elseif si and ls[si + 3] > now then
  lent = ls[si + 2] -- nothing written: its loan as it is
end
return {granted, avail(d), ms(wait), ms(d), lent, crowded}
