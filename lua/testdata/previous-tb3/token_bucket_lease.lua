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
local want, need = ARGV[5] + 0, ARGV[6] + 0
local held, ttl_us, idle_us = ARGV[7] + 0, ARGV[8] + 0, ARGV[9] + 0
local spent_before, call, unans = ARGV[10] + 0, ARGV[11] + 0, ARGV[12] + 0

local fast = true -- false: every call takes the general path (tests)
local v = redis.call('GET', key)

-- The fast path answers the states with no other holder: no state, or
-- state whose running loans are the caller's alone, its loan first and
-- any ended loans after it (a holder renewing its own key, whether it
-- still holds its loan whole or reports tokens spent). It is the general
-- path below, operation for operation, for those states, and writes the
-- same bytes: the caller's loan in locals, the ended loans (el: lent and
-- expiry, two entries each) in order, no holder compared. Any other
-- state breaks out to the general path. (A block, not a function: a
-- closure capturing the script's locals costs more than the path's
-- arithmetic.)
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
    -- the latest
    local nl, ne = granted, t + ttl_us
    if lent then
      nl = run + granted
      if exp > ne then ne = exp end
      if early > 0 then
        if not el then el = {0, 0, 0, 0} end
        if early_at > t then early_at = t end
        el[2 * n + 1], el[2 * n + 2] = early, early_at
        n = n + 1
      end
      if late == 0 then
        -- nothing
      elseif granted > 0 then
        if not el then el = {0, 0, 0, 0} end
        if late_at > t then late_at = t end
        el[2 * n + 1], el[2 * n + 2] = late, late_at
        n = n + 1
      else
        nl = nl + late -- kept lent
      end
      if nl == 0 and n > 0 then break end -- the loan goes, the last ended takes its place
    end
    -- trim: merge the ended loans of one time, then drop (or past
    -- max_ended bake into stored) the oldest while it caps nothing
    local i = 2
    while i < 2 * n do
      local j = i + 2
      while j <= 2 * n do
        if el[i] == el[j] then
          el[i - 1] = el[i - 1] + el[j - 1]
          el[j - 1], el[j] = el[2 * n - 1], el[2 * n]
          n = n - 1
        else
          j = j + 2
        end
      end
      i = i + 2
    end
    while n > 0 do
      local o = 2
      for k = 4, 2 * n, 2 do
        if el[k] < el[o] then o = k end
      end
      local x = el[o]
      local a = 0
      if nl > 0 and ne >= x then a = nl end
      for k = 2, 2 * n, 2 do
        if el[k] >= x then a = a + el[k - 1] end
      end
      local c = cf - a + (t - x) * lf / pf
      if c < cf then
        if n <= max_ended then break end
        stored = math.min(stored, c)
      end
      el[o - 1], el[o] = el[2 * n - 1], el[2 * n]
      n = n - 1
    end
    -- full_in and write
    local d = (cf - stored) * pf / lf
    local loans = ''
    if holder ~= '' and nl > 0 then
      local a = nl
      for k = 2, 2 * n, 2 do
        if el[k] >= ne then a = a + el[k - 1] end
      end
      local c = (ne - t) + a * pf / lf
      if c > d then d = c end
      loans = pack_loan(holder, nl, ne, t - idle_us, t, false)
      if ne > now then lent_now = nl end
    end
    for k = 2, 2 * n, 2 do
      local x = el[k]
      local a = 0
      if nl > 0 and ne >= x then a = nl end
      for m = 2, 2 * n, 2 do
        if el[m] >= x then a = a + el[m - 1] end
      end
      local c = (x - t) + a * pf / lf
      if c > d then d = c end
      loans = loans .. pack_loan('', el[k - 1], x, 0, t, false)
    end
    redis.call('SET', key, head('tb', stored, t, last_of(call, granted, lc, lg)) .. loans, 'PX', ttl(t - now + d))
  end
  return {granted, math.floor(tokens), ms(wait), ms((cf - tokens) * pf / lf), lent_now}
until true

-- The general path: lease/loans.go operation for operation, on the
-- loans as one flat list (see loans in leased.lua), with the loan
-- helpers written out inline: a helper function costs Redis a closure
-- per call, more than its loops. after is A(x) over list l; remove and
-- append change a list as loans.remove and append do.
local function after(l, x)
  local a = 0
  for b = 0, #l - 4, 4 do
    if l[b + 3] >= x then a = a + l[b + 2] end
  end
  return a
end
local function remove(l, b)
  local m = #l
  l[b + 1], l[b + 2], l[b + 3], l[b + 4] = l[m - 3], l[m - 2], l[m - 1], l[m]
  l[m], l[m - 1], l[m - 2], l[m - 3] = nil, nil, nil, nil
end
local function append(l, id, lent, exp, last)
  local m = #l
  l[m + 1], l[m + 2], l[m + 3], l[m + 4] = id, lent, exp, last
end

-- read
local ls, lvl, updated, last_c, last_g = {}, nil, 0, 0, 0
if v then
  local h, pos
  h, lvl, updated, pos = struct.unpack('<BdI7', v)
  if h % 2 == 1 then last_c, last_g, pos = struct.unpack('<I4' .. W[(h - h % 2) / 2 % 4], v, pos) end
  local size, m = #v, 0
  while pos <= size do
    local kind = string.byte(v, pos)
    local id, lent, d1, d2 = '', 0, 0, nil
    local k4 = (kind - kind % 4) / 4 -- the width codes, without math.floor
    local f = W[kind % 4] .. W[k4 % 4]
    if kind >= 128 then
      id, lent, d1, d2, pos = struct.unpack('<c8' .. f .. W[(k4 - k4 % 4) / 4 % 4], v, pos + 1)
    elseif kind >= 64 then
      id, lent, d1, pos = struct.unpack('<c8' .. f, v, pos + 1)
    else
      lent, d1, pos = struct.unpack('<' .. f, v, pos + 1)
    end
    local last = 0 -- unzz written out
    if d2 then
      if d2 % 2 == 0 then last = updated - d2 / 2 else last = updated + (d2 + 1) / 2 end
    end
    if d1 % 2 == 0 then d1 = d1 / 2 else d1 = -(d1 + 1) / 2 end
    ls[m + 1], ls[m + 2], ls[m + 3], ls[m + 4] = id, lent, updated + d1, last
    m = m + 4
  end
end
local raw, t = cf, now
if lvl then
  local elapsed = now - updated
  if elapsed < 0 then elapsed = 0 end
  local x = lvl + elapsed * lf / pf
  if x < cf then raw = x end
  if updated > now then t = updated end
end
-- find: the caller's loan, at si
local si = nil
if holder ~= '' then
  for b = 0, #ls - 4, 4 do
    if ls[b + 1] == holder then
      si = b
      break
    end
  end
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
local tokens = raw
if lvl then
  -- effective
  local eff = ls
  if si and run ~= ls[si + 2] then
    local e = ls[si + 3]
    if t < e then e = t end
    eff = {}
    for k = 1, #ls do
      eff[k] = ls[k]
    end
    eff[si + 2] = run
    if early == 0 then
      -- nothing
    elseif early_at < e then
      append(eff, '', early, early_at, 0)
    else
      eff[si + 2] = eff[si + 2] + early
    end
    if late == 0 then
      -- nothing
    elseif late_at < e then
      append(eff, '', late, late_at, 0)
    else
      eff[si + 2] = eff[si + 2] + late
    end
  end
  -- cap_level
  for b = 0, #eff - 4, 4 do
    local x = eff[b + 3]
    local s = x
    if t < s then s = t end
    local c = cf - after(eff, x) + (t - s) * lf / pf
    if c < tokens then tokens = c end
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
if granted > 0 or (si and ls[si + 3] > t) then
  -- Every call of a holder with a loan settles it. The stored level is
  -- the refill less the grants: the running loans cap it when read, the
  -- ended ones too until trim drops them (or bakes their cap in).
  -- keep
  local keep = 0
  if si and ls[si + 3] > t then
    if granted > 0 then keep = run else keep = run + late end
  end
  tokens = tokens - granted
  -- A grant without a holder lends nothing: it comes off the level as
  -- capped (see lease.TokenBucketState.Lease).
  local stored = tokens
  if holder ~= '' then stored = raw - granted end
  -- settling
  if si and run ~= ls[si + 2] then
    local exp = ls[si + 3]
    local e = exp
    if t < e then e = t end
    ls[si + 2] = run
    if early > 0 then append(ls, '', early, math.min(early_at, e), 0) end
    if late == 0 then
      -- nothing
    elseif granted > 0 or exp <= t then
      append(ls, '', late, math.min(late_at, e), 0)
    else
      ls[si + 2] = ls[si + 2] + late -- kept lent
    end
  end
  -- retire
  for b = 0, #ls - 4, 4 do
    if ls[b + 1] ~= '' and ls[b + 3] <= t then ls[b + 1], ls[b + 4] = '', 0 end
  end
  -- settle
  if holder ~= '' then
    local i = nil
    for b = 0, #ls - 4, 4 do
      if ls[b + 1] == holder then
        i = b
        break
      end
    end
    local lent, exp, last = keep + granted, t + ttl_us, t - idle_us
    if i and ls[i + 3] > exp then exp = ls[i + 3] end
    if i and lent > 0 then
      ls[i + 2], ls[i + 3], ls[i + 4] = lent, exp, last
    elseif i then
      remove(ls, i)
    elseif lent > 0 then
      append(ls, holder, lent, exp, last)
    end
  end
  -- trim: merge the ended loans of one time, then drop (or past
  -- max_ended bake into stored) the oldest while it caps nothing: its cap
  -- at t is C - A(E) + (t - E)*L/P.
  local i = 0
  while i < #ls do
    local j = i + 4
    while j < #ls do
      if ls[i + 1] == '' and ls[j + 1] == '' and ls[i + 3] == ls[j + 3] then
        ls[i + 2] = ls[i + 2] + ls[j + 2]
        remove(ls, j)
      else
        j = j + 4
      end
    end
    i = i + 4
  end
  while true do
    local oldest, n = nil, 0
    for b = 0, #ls - 4, 4 do
      if ls[b + 1] == '' then
        n = n + 1
        if not oldest or ls[b + 3] < ls[oldest + 3] then oldest = b end
      end
    end
    if not oldest then break end
    local x = ls[oldest + 3]
    local c = cf - after(ls, x) + (t - x) * lf / pf
    if c < cf then
      if n <= max_ended then break end
      stored = math.min(stored, c)
    end
    remove(ls, oldest)
  end
  -- full_in
  local d = (cf - stored) * pf / lf
  for b = 0, #ls - 4, 4 do
    local x = ls[b + 3]
    local c = (x - t) + after(ls, x) * pf / lf
    if c > d then d = c end
  end
  -- write
  local parts = {head('tb', stored, t, last_of(call, granted, last_c, last_g))}
  for b = 0, #ls - 4, 4 do
    parts[#parts + 1] = pack_loan(ls[b + 1], ls[b + 2], ls[b + 3], ls[b + 4], t, false)
  end
  redis.call('SET', key, table.concat(parts), 'PX', ttl(t - now + d))
end
-- lent_to
local lent = 0
if holder ~= '' then
  for b = 0, #ls - 4, 4 do
    if ls[b + 1] == holder then
      if ls[b + 3] > now then lent = ls[b + 2] end
      break
    end
  end
end
return {granted, math.floor(tokens), ms(wait), ms((cf - tokens) * pf / lf), lent}
