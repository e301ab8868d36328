-- leased: joined after the prelude in front of the eight lease and return
-- scripts. It parses their common arguments and holds the loan helpers,
-- which mirror lease/loans.go operation for operation.
--
-- ARGV     limit, period_us, capacity, holder, then per script:
--          lease:  want, need, held, ttl_us, idle_us, spent_before, call,
--                  unanswered (Lessee.Call, Lessee.Unanswered; 0: none)
--          return: tokens
--
-- A loan is what the Store lent one holder and still counts against the
-- key's capacity: '<lent>,<expiry µs>' for the windowed algorithms
-- (expiry 0: their loans end with the window), '<lent>,<expiry
-- µs>,<expiry − last spend, µs>' for token_bucket and gcra (the holder's
-- last spend before its last call, lease.Loan.LastSpend, is kept as its
-- distance to the expiry: fewer digits). An ended loan has no holder: its
-- tokens were spent by its expiry, which still caps the level.
local lf, pf, cf = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local holder = ARGV[4]

-- A key's state is one binary string (struct.pack, little-endian; GET,
-- then SET: one read and one write per call, no hash to rewrite field by
-- field, no number printed or parsed as text): a byte n, n plain fields
-- (a one-letter name and a double: 't', 'u', 'w', 'c', 'p', '#', '$'),
-- then the loans, each a kind byte followed by (0) lent, expiry: an ended
-- loan; (1) holder, lent, expiry; (2) holder, lent, expiry, expiry − last
-- spend. The holder is the Store's 8-byte digest of the Lessee ID.
--
-- read returns the key's plain fields as a table of numbers, and its loans
-- as a list of {id, lent, exp, last}.
local function read()
  local v = redis.call('GET', key)
  local st, ls = {}, {}
  if not v then return st, ls end
  local n, pos = struct.unpack('<B', v)
  for _ = 1, n do
    local name, x
    name, x, pos = struct.unpack('<c1d', v, pos)
    st[name] = x
  end
  local size = #v
  while pos <= size do
    local kind, id, l, e, b
    kind, pos = struct.unpack('<B', v, pos)
    if kind == 0 then
      id = ''
      l, e, pos = struct.unpack('<dd', v, pos)
    elseif kind == 1 then
      id, l, e, pos = struct.unpack('<c8dd', v, pos)
    else
      id, l, e, b, pos = struct.unpack('<c8ddd', v, pos)
    end
    local last = 0
    if b then last = e - b end
    ls[#ls + 1] = {id = id, lent = l, exp = e, last = last}
  end
  return st, ls
end

local function find(ls, id)
  for i, l in ipairs(ls) do
    if l.id == id then return i end
  end
  return nil
end

-- after is A(e): the tokens of the loans expiring at or after e.
local function after(ls, e)
  local a = 0
  for _, l in ipairs(ls) do
    if l.exp >= e then a = a + l.lent end
  end
  return a
end

-- lent_to is what ls lends id at t (t < 0 for windowed loans).
local function lent_to(ls, id, t)
  if id == '' then return 0 end
  local i = find(ls, id)
  if i and ls[i].exp > t then return ls[i].lent end
  return 0
end

-- settle records a call of holder at t that granted g: its loan becomes
-- keep + g, expiring at max(its expiry, t + ttl), its last spend t -
-- idle_us (windowed: expiry and last spend 0). Mirrors loans.settle.
local function settle(ls, keep, g, t, ttl_us, idle_us, windowed)
  if holder == '' then return ls end
  local i = find(ls, holder)
  local lent = keep + g
  local exp, last = 0, 0
  if not windowed then
    exp, last = t + ttl_us, t - idle_us
    if i then exp = math.max(exp, ls[i].exp) end
  end
  if i and lent > 0 then
    ls[i].lent, ls[i].exp, ls[i].last = lent, exp, last
  elseif i then
    ls[i] = ls[#ls]
    ls[#ls] = nil
  elseif lent > 0 then
    ls[#ls + 1] = {id = holder, lent = lent, exp = exp, last = last}
  end
  return ls
end

-- last_call reads a token_bucket or gcra key's '#' and '$' fields: the
-- Lessee.Call of the last call that settled a loan and what it granted
-- (absent: 0, 0). Mirrors lease's lastCall.
local function last_call(st)
  return st['#'] or 0, st['$'] or 0
end

-- unanswered handles a call of holder at t that names its previous call
-- unans as unanswered (0: none): if that call is the key's last call
-- (last_c, granting last_g), its grant never reached the holder. It takes
-- that off holder's loan and returns it: what the key gets back. The loan
-- runs on, even at 0. Mirrors loans.unanswered.
local function unanswered(ls, unans, last_c, last_g, t)
  if unans == 0 or holder == '' or last_c ~= unans then return 0 end
  local i = find(ls, holder)
  if not i or ls[i].exp <= t then return 0 end
  local back = math.min(last_g, ls[i].lent)
  ls[i].lent = ls[i].lent - back
  return back
end

-- tat_back is a gcra TAT after n tokens come back at t (a return, or an
-- unanswered call's grant): max(t, max(tat, t) - floor(n*P/L)). Mirrors
-- lease's tatBack.
local function tat_back(tat, n, t)
  local base = math.max(tat, t)
  return base - math.min(math.floor(n * pf / lf), base - t)
end

-- last_field appends the '#' and '$' fields for a call that granted g to
-- st (the fields to write): none when the call was not told apart.
-- Mirrors lease's lastCallOf.
local function last_field(st, call, g)
  if call ~= 0 and holder ~= '' then
    st[#st + 1] = '#'
    st[#st + 1] = call
    st[#st + 1] = '$'
    st[#st + 1] = g
  end
  return st
end

-- held_of is what a windowed grant keeps of holder's loan: min(lent, held).
local function held_of(ls, held)
  local i = find(ls, holder)
  if holder == '' or not i then return 0 end
  return math.min(ls[i].lent, held)
end

-- end_loan ends holder's loan at t by a return of n: min(n, lent) goes
-- back (returned), the rest counts as spent at t (an ended loan). Mirrors
-- loans.end.
local function end_loan(ls, n, t)
  local i = find(ls, holder)
  if holder == '' or not i then return ls, 0 end
  local back = math.min(n, ls[i].lent)
  local rest = ls[i].lent - back
  if rest > 0 then
    ls[i] = {id = '', lent = rest, exp = math.min(ls[i].exp, t), last = 0}
    return ls, back
  end
  ls[i] = ls[#ls]
  ls[#ls] = nil
  return ls, back
end

-- retire turns the holders' loans that ended by t into ended loans (no
-- holder). Mirrors loans.retire.
local function retire(ls, t)
  for i, l in ipairs(ls) do
    if l.id ~= '' and l.exp <= t then
      ls[i] = {id = '', lent = l.lent, exp = l.exp, last = 0}
    end
  end
  return ls
end

-- take removes holder's loan and returns what a return of n gives back:
-- min(n, lent).
local function take(ls, n)
  local i = find(ls, holder)
  if holder == '' or not i then return ls, 0 end
  local back = math.min(n, ls[i].lent)
  ls[i] = ls[#ls]
  ls[#ls] = nil
  return ls, back
end

-- split is how the caller (holding held, idle for idle_us, reporting
-- spent_before) sees its loan at t: {i, run, early, late, early_at,
-- late_at}, i nil without a loan. Mirrors loans.split.
local function split(ls, held, idle_us, spent_before, t)
  local i = nil
  if holder ~= '' then i = find(ls, holder) end
  if not i then return {run = 0, early = 0, late = 0} end
  local l = ls[i]
  local sp = {i = i}
  sp.run = math.min(l.lent, held)
  sp.early = math.min(spent_before, l.lent - sp.run)
  sp.late = l.lent - sp.run - sp.early
  sp.late_at = t - idle_us
  sp.early_at = sp.late_at
  if l.last > 0 then sp.early_at = math.min(l.last, sp.late_at) end
  return sp
end

-- keep is what a call at t that granted g keeps of the split loan
-- (settle): nothing of one that ended; run after a grant; run + late
-- otherwise. Mirrors split.keep.
local function keep_of(ls, sp, t, g)
  if not sp.i or ls[sp.i].exp <= t then return 0 end
  if g > 0 then return sp.run end
  return sp.run + sp.late
end

-- effective is ls as the caller sees it at t: the tokens of its loan it no
-- longer holds count from when they were spent (see split) like loans
-- that ended then, or at the loan's end if earlier. ls is not changed.
-- Mirrors loans.effective.
local function effective(ls, sp, t)
  if not sp.i or sp.run == ls[sp.i].lent then return ls end
  local l = ls[sp.i]
  local e = math.min(l.exp, t)
  local out = {}
  for j, x in ipairs(ls) do
    out[j] = x
  end
  local own = {id = l.id, lent = sp.run, exp = l.exp, last = l.last}
  out[sp.i] = own
  for _, part in ipairs({{sp.early, sp.early_at}, {sp.late, sp.late_at}}) do
    if part[1] == 0 then
      -- nothing
    elseif part[2] < e then
      out[#out + 1] = {id = '', lent = part[1], exp = part[2], last = 0}
    else
      own.lent = own.lent + part[1]
    end
  end
  return out
end

-- settling is ls as a write at t that settles holder's split loan sp
-- leaves it: the kept part runs until its expiry, the settled parts
-- (early, and late after a grant) become ended loans. Mirrors
-- loans.settling.
local function settling(ls, sp, t, granted)
  if not sp.i or sp.run == ls[sp.i].lent then return ls end
  local l = ls[sp.i]
  local e = math.min(l.exp, t)
  local out = {}
  for j, x in ipairs(ls) do
    out[j] = x
  end
  local own = {id = l.id, lent = sp.run, exp = l.exp, last = l.last}
  out[sp.i] = own
  if sp.early > 0 then
    out[#out + 1] = {id = '', lent = sp.early, exp = math.min(sp.early_at, e), last = 0}
  end
  if sp.late == 0 then
    -- nothing
  elseif granted or l.exp <= t then
    out[#out + 1] = {id = '', lent = sp.late, exp = math.min(sp.late_at, e), last = 0}
  else
    own.lent = own.lent + sp.late -- kept lent
  end
  return out
end

-- max_ended bounds the ended loans a key keeps (lease's maxEnded).
local max_ended = 3

-- trim drops the ended loans that no longer cap anything at t, oldest
-- first; merges the ended loans of the same time; and while more than
-- max_ended remain hands the oldest to bake and drops it. binding(l, a)
-- and bake(l, a) get the loan and A(its expiry). Mirrors loans.trim.
local function trim(ls, binding, bake)
  local i = 1
  while i <= #ls do
    local j = i + 1
    while j <= #ls do
      if ls[i].id == '' and ls[j].id == '' and ls[i].exp == ls[j].exp then
        ls[i].lent = ls[i].lent + ls[j].lent
        ls[j] = ls[#ls]
        ls[#ls] = nil
      else
        j = j + 1
      end
    end
    i = i + 1
  end
  while true do
    local oldest, n = nil, 0
    for k, l in ipairs(ls) do
      if l.id == '' then
        n = n + 1
        if not oldest or l.exp < ls[oldest].exp then oldest = k end
      end
    end
    if not oldest then return ls end
    local l = ls[oldest]
    local a = after(ls, l.exp)
    if binding(l, a) then
      if n <= max_ended then return ls end
      bake(l, a)
    end
    ls[oldest] = ls[#ls]
    ls[#ls] = nil
  end
end

-- cap_level caps a token_bucket level at t by the loans: at most
-- C - A(E) + (t - min(E, t))*L/P for every loan.
local function cap_level(ls, level, t)
  for _, l in ipairs(ls) do
    local s = math.min(l.exp, t)
    level = math.min(level, cf - after(ls, l.exp) + (t - s) * lf / pf)
  end
  return level
end

-- full_in is how long after t a token_bucket full in d µs by refill
-- alone is full with its loans counted (running and ended).
local function full_in(ls, d, t)
  for _, l in ipairs(ls) do
    d = math.max(d, (l.exp - t) + after(ls, l.exp) * pf / lf)
  end
  return d
end

-- floor_tat is the lowest TAT a gcra key's loans allow at t.
local function floor_tat(ls, t)
  local f = 0
  for _, l in ipairs(ls) do
    local s = math.min(l.exp, t)
    f = math.max(f, s + math.ceil(after(ls, l.exp) * pf / lf))
  end
  return f
end

-- write replaces the key with the fields of st (name, number pairs) and
-- the loans ls, expiring in ttl_ms (nil: keeping its expiry).
local function write(st, ls, ttl_ms)
  local f, a = {'<B'}, {#st / 2}
  for i = 1, #st, 2 do
    f[#f + 1] = 'c1d'
    a[#a + 1] = st[i]
    a[#a + 1] = st[i + 1]
  end
  for _, l in ipairs(ls) do
    if l.id == '' then
      f[#f + 1] = 'Bdd'
      a[#a + 1] = 0
    elseif l.last > 0 then
      f[#f + 1] = 'Bc8ddd'
      a[#a + 1] = 2
      a[#a + 1] = l.id
    else
      f[#f + 1] = 'Bc8dd'
      a[#a + 1] = 1
      a[#a + 1] = l.id
    end
    a[#a + 1] = l.lent
    a[#a + 1] = l.exp
    if l.id ~= '' and l.last > 0 then a[#a + 1] = l.exp - l.last end
  end
  local v = struct.pack(table.concat(f), unpack(a))
  if ttl_ms then
    redis.call('SET', key, v, 'PX', ttl_ms)
  else
    redis.call('SET', key, v, 'KEEPTTL')
  end
end
