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
--          spent_before, call, unanswered, max_holders
-- returns  {granted, remaining, wait_ms, reset_ms, lent, crowded}
--
-- An absent key is a full bucket. The stored level is the refill less the
-- grants, capped when read by the loans (running, and ended ones while
-- they still cap it). The key is written when tokens are granted, or when
-- the holder has a running loan (every call settles it, see split), and
-- expires when the bucket would be full again with every loan ended. A
-- holder without a running loan, when max_holders (> 0) holders have
-- one, is crowded out: the call is made with no holder for exactly need
-- (lease.Lessee.MaxHolders), and crowded is 1.
local want, need = ARGV[5] + 0, ARGV[6] + 0
local held, ttl_us, idle_us = ARGV[7] + 0, ARGV[8] + 0, ARGV[9] + 0
local spent_before, call, unans = ARGV[10] + 0, ARGV[11] + 0, ARGV[12] + 0
local maxh = ARGV[13] + 0

local fast = true -- false: every call takes the general path (tests)
local v = redis.call('GET', key)

-- The fast path answers the states with no other holder: no state, or
-- state whose running loans are the caller's alone, its loan first and
-- any ended loans after it, by expiry (a holder renewing its own key,
-- whether it still holds its loan whole or reports tokens spent; no
-- holder there to crowd it out). It is the general path below, operation
-- for operation, for those states, and writes the same bytes: the
-- caller's loan in locals, the ended loans (el: lent and expiry, two
-- entries each) by expiry, no holder compared. Any other state breaks out
-- to the general path. (A block, not a function: a closure capturing the
-- script's locals costs more than the path's arithmetic.)
repeat -- the fast path (break: the general path)
  if not fast then break end
  local raw, t, lc, lg = cf, now, 0, 0
  local lent, exp, last = nil, 0, 0 -- the caller's loan
  local el, n = nil, 0 -- the ended loans after it: n of them
  if v then
    local h, lvl, u, pos = struct.unpack('<BdI7', v)
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
        if d2 % 2 == 0 then last = u - d2 / 2 else last = u + (d2 + 1) / 2 end
      else
        id, lent, d1, pos = struct.unpack(f, v, pos + 1)
      end
      if id ~= holder then break end
      if d1 % 2 == 0 then exp = u + d1 / 2 else exp = u - (d1 + 1) / 2 end
      if pos <= size then el = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0} end -- five loans without a rehash
      while pos <= size do
        kind = string.byte(v, pos)
        if kind >= 64 then break end -- another holder's loan
        local a, x
        a, x, pos = struct.unpack('<' .. W[kind % 4] .. W[(kind - kind % 4) / 4 % 4], v, pos + 1)
        if x % 2 == 0 then x = u + x / 2 else x = u - (x + 1) / 2 end
        if n > 0 and x > el[2 * n] then
          pos = 0 -- not by expiry (an older release wrote it): the general path sorts them
          break
        end
        el[2 * n + 1], el[2 * n + 2] = a, x
        n = n + 1
      end
      if pos <= size then break end
    end
    local elapsed = now - u
    if elapsed < 0 then elapsed = 0 end
    local x = lvl + elapsed * lf / pf -- raw = min(cf, x), t = max(now, u)
    if x < cf then raw = x end
    if u > now then t = u end
  end
  local tokens = raw
  local run, early, late, early_at, late_at = 0, 0, 0, 0, 0
  if lent then
    if exp <= t then break end -- it ended: retire
    if unans ~= 0 and lc == unans then
      local back = math.min(lg, lent)
      lent = lent - back
      if back > 0 then raw = math.min(cf, raw + back) end
      tokens = raw
    end
    -- split
    run = lent
    if held < run then run = held end
    early = lent - run
    if spent_before < early then early = spent_before end
    late = lent - run - early
    late_at = t - idle_us
    early_at = late_at
    if last > 0 and last < late_at then early_at = last end
    -- effective: the loan runs (past t), so what the caller spent before
    -- t ended then (e1, e2, at x1, x2), at t or later it counts in the
    -- loan (r); then cap_level over the loan, the ended and those.
    local r, e1, x1, e2, x2 = run, 0, 0, 0, 0
    if early == 0 then
      -- nothing
    elseif early_at < t then
      e1, x1 = early, early_at
    else
      r = r + early
    end
    if late == 0 then
      -- nothing
    elseif late_at < t then
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
        if t < s then s = t end
        local c = cf - a + (t - s) * lf / pf
        if c < tokens then tokens = c end
      end
    end
  end
  local avail = math.floor(tokens)
  local granted, wait = 0, 0
  if need > cf then
    wait = pf
  elseif avail >= need then
    granted = want
    if avail < want then granted = avail end
  else
    wait = (need - tokens) * pf / lf
  end
  local lent_now = 0
  if granted > 0 or lent then
    tokens = tokens - granted
    local stored = raw - granted
    -- settling and settle: the loan keeps run (and late, without a
    -- grant) plus the grant; early and late (after a grant) end, at t at
    -- the latest, among the ended loans by expiry
    local nl, ne = granted, t + ttl_us
    if lent then
      nl = run + granted
      if exp > ne then ne = exp end
      local a2 = 0 -- late, after a grant
      if late > 0 and granted > 0 then a2 = late elseif late > 0 then nl = nl + late end
      for i = 1, 2 do
        local a, x = early, early_at
        if i == 2 then a, x = a2, late_at end
        if a > 0 then
          if x > t then x = t end
          if not el then el = {0, 0, 0, 0} end
          local j = n -- insert: after the ended loans of its time
          while j > 0 and el[2 * j] < x do
            el[2 * j + 1], el[2 * j + 2] = el[2 * j - 1], el[2 * j]
            j = j - 1
          end
          el[2 * j + 1], el[2 * j + 2] = a, x
          n = n + 1
        end
      end
      if nl == 0 and n > 0 then break end -- the loan goes
    end
    -- trim: merge the ended loans of one time (neighbours), then drop (or
    -- past max_ended bake into stored) the oldest, the last, while it
    -- caps nothing; its A(E) is what all the loans lend
    local m, a = 0, 0
    if nl > 0 then a = nl end
    for k = 1, n do
      if m > 0 and el[2 * m] == el[2 * k] then
        el[2 * m - 1] = el[2 * m - 1] + el[2 * k - 1]
      else
        m = m + 1
        el[2 * m - 1], el[2 * m] = el[2 * k - 1], el[2 * k]
      end
      a = a + el[2 * k - 1]
    end
    n = m
    while n > 0 do
      local c = cf - a + (t - el[2 * n]) * lf / pf
      if c < cf then
        if n <= max_ended then break end
        stored = math.min(stored, c)
      end
      a = a - el[2 * n - 1]
      n = n - 1
    end
    -- full_in, a running sum by expiry, and write
    local d = (cf - stored) * pf / lf
    local parts = {head('tb', stored, t, last_of(call, granted, lc, lg))}
    a = 0
    if holder ~= '' and nl > 0 then
      a = nl
      local c = (ne - t) + a * pf / lf
      if c > d then d = c end
      parts[2] = pack_loan(holder, nl, ne, t - idle_us, t, false)
      if ne > now then lent_now = nl end
    end
    for k = 1, n do
      local x = el[2 * k]
      a = a + el[2 * k - 1]
      local c = (x - t) + a * pf / lf
      if c > d then d = c end
      parts[#parts + 1] = pack_loan('', el[2 * k - 1], x, 0, t, false)
    end
    redis.call('SET', key, table.concat(parts), 'PX', ttl(t - now + d))
  end
  return {granted, math.floor(tokens), ms(wait), ms((cf - tokens) * pf / lf), lent_now, 0}
until true

-- The general path: lease/algo/loans.go operation for operation, on the
-- loans as one flat list (see loans in leased.lua) by expiry, latest
-- first, with the loan helpers written out inline: a helper function
-- costs Redis a closure per call, more than its loops. Every pass over
-- the loans is one: A(E) of a loan is a running sum by expiry (a call
-- costs Redis about as much per loan of the key as per the rest of it).
-- rise inserts a loan as loans.insert does: from the end (base b, #l) to
-- the front while the loan before it expires earlier.
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
local ls, lvl, updated, last_c, last_g = {}, nil, 0, 0, 0
local raw, t, si, nh = cf, now, nil, 0
if v then
  local h, pos
  h, lvl, updated, pos = struct.unpack('<BdI7', v)
  if h % 2 == 1 then last_c, last_g, pos = struct.unpack('<I4' .. W[(h - h % 2) / 2 % 4], v, pos) end
  local elapsed = now - updated
  if elapsed < 0 then elapsed = 0 end
  local x = lvl + elapsed * lf / pf
  if x < cf then raw = x end
  if updated > now then t = updated end
  ls, si, nh = read_loans(v, pos, updated, t)
end
-- crowd: a holder without a running loan, when maxh holders have one,
-- is crowded out (loans.crowd): the call is made with no holder, for
-- exactly need
local crowded = 0
if holder ~= '' and maxh > 0 and nh >= maxh and not (si and ls[si + 3] > t) then
  crowded, holder, si, want = 1, '', nil, need
end
-- unanswered
if unans ~= 0 and si and last_c == unans and ls[si + 3] > t then
  local back = math.min(last_g, ls[si + 2])
  ls[si + 2] = ls[si + 2] - back
  if back > 0 then
    -- Granted by a call whose answer the holder never got: back to the
    -- level, as a return gives them (at most C).
    raw = math.min(cf, raw + back)
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
  late_at = t - idle_us
  early_at = late_at
  if ls[si + 4] > 0 and ls[si + 4] < late_at then early_at = ls[si + 4] end
end
local tokens, total = raw, 0 -- total: what the loans lend
if lvl then
  -- effective: the caller's loan counts r; what it no longer holds and
  -- spent before e (its end, or t) counts as ended loans beside the
  -- list, late (a1 at x1) and early (a2 at x2 ≤ x1)
  local r, a1, x1, a2, x2 = 0, 0, 0, 0, 0
  if si then
    r = ls[si + 2]
    if run ~= r then
      local e = ls[si + 3]
      if t < e then e = t end
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
  -- cap_level: C - A(x) + (t - min(x, t))*L/P at each time x, A(x) a
  -- running sum by expiry. Those at or after t cap at C - A(x), least at
  -- the last of them: one sum. Then each time before t, the parts'
  -- among them (after t: the parts end before e).
  local a, b, m = 0, 0, #ls
  while b < m and ls[b + 3] >= t do
    if b == si then a = a + r else a = a + ls[b + 2] end
    b = b + 4
  end
  if b > 0 and cf - a < tokens then tokens = cf - a end
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
    local c = cf - a + (t - x) * lf / pf
    if c < tokens then tokens = c end
  end
  total = a -- the effective loans lend what the loans do
end
local avail = math.floor(tokens)

local granted, wait = 0, 0
if need > cf then
  wait = pf
elseif avail >= need then
  granted = want
  if avail < want then granted = avail end
else
  wait = (need - tokens) * pf / lf
end
local lent = 0 -- what the caller is lent after the call
if granted > 0 or (si and ls[si + 3] > t) then
  -- Every call of a holder with a loan settles it. The stored level is
  -- the refill less the grants: the running loans cap it when read, the
  -- ended ones too until trim drops them (or bakes their cap in).
  -- keep
  local running = si and ls[si + 3] > t
  local keep = 0
  if running then
    if granted > 0 then keep = run else keep = run + late end
  end
  tokens = tokens - granted
  -- A grant without a holder lends nothing: it comes off the level as
  -- capped (see lease.TokenBucketState.Lease).
  local stored = tokens
  if holder ~= '' then stored = raw - granted end
  -- settling: the ended parts go where their time puts them, after the
  -- caller's loan (they end no later than it)
  if si and run ~= ls[si + 2] then
    local exp = ls[si + 3]
    local e = exp
    if t < e then e = t end
    ls[si + 2] = run
    if early > 0 then rise(ls, #ls, '', early, math.min(early_at, e), 0) end
    if late == 0 then
      -- nothing
    elseif granted > 0 or exp <= t then
      rise(ls, #ls, '', late, math.min(late_at, e), 0)
    else
      ls[si + 2] = ls[si + 2] + late -- kept lent
    end
  end
  -- settle: the caller's running loan takes a later expiry, or goes; a
  -- new one comes (one that ended is retired below). Either is written
  -- where its expiry puts it (write_loans), and the running one skipped:
  -- no loan moves in ls.
  local skip, vl, vx, vlast = nil, 0, 0, 0
  if holder ~= '' then
    local lent, exp, last = keep + granted, t + ttl_us, t - idle_us
    if running and ls[si + 3] > exp then exp = ls[si + 3] end
    if running then skip, total = si, total - ls[si + 2] end
    if lent > 0 then vl, vx, vlast, total = lent, exp, last, total + lent end
  end
  -- retire and trim: the holders' loans that ended by t are ended loans;
  -- merge the ended loans of one time, then drop (or past max_ended bake
  -- into stored) the oldest while it caps nothing: its cap at t is C -
  -- A(E) + (t - E)*L/P. By expiry, the loans that ended by t are the last
  -- ones, from f (only those change): those of one time are neighbours,
  -- the oldest is the last, and its A(E) is total, what all the loans
  -- lend (settling split the caller's loan, settle changed it by what
  -- total counts).
  local f = #ls
  while f > 0 and ls[f - 1] <= t do
    f = f - 4
  end
  local w, a, n = f, total, 0 -- w: the base after the loans kept
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
    local c = cf - a + (t - ls[b + 3]) * lf / pf
    if c < cf then
      if n <= max_ended then break end
      stored = math.min(stored, c)
    end
    a = a - ls[b + 2]
    ls[b + 4], ls[b + 3], ls[b + 2], ls[b + 1] = nil, nil, nil, nil
    w, n = b, n - 1
  end
  -- full_in: (E - t) + A(E)*P/L, a running sum by expiry, as the loans
  -- are written
  local parts = {head('tb', stored, t, last_of(call, granted, last_c, last_g))}
  local d = write_loans(parts, ls, w, skip, holder, vl, vx, vlast, t, t, 'tb', (cf - stored) * pf / lf)
  redis.call('SET', key, table.concat(parts), 'PX', ttl(t - now + d))
  lent = vl -- expiring after t
elseif si and ls[si + 3] > now then
  lent = ls[si + 2] -- nothing written: its loan as it is
end
return {granted, math.floor(tokens), ms(wait), ms((cf - tokens) * pf / lf), lent, crowded}
