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
-- key's capacity: its lent tokens and, for token_bucket and gcra, its
-- expiry and the holder's last spend before its last call
-- (lease.Loan.LastSpend; windowed loans end with their window). An ended
-- loan has no holder: its tokens were spent by its expiry, which still
-- caps the level.
local lf, pf, cf = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local holder = ARGV[4]

-- A key's state is one binary string (struct.pack, little-endian; GET,
-- then SET: one read and one write per call, no number printed or parsed
-- as text), as small as its values allow: integers (times in µs, counts,
-- lent tokens) take 1, 2, 4 or 7 bytes (width codes 0-3, I1 I2 I4 I7,
-- named in header and kind bytes), only token_bucket's level is a double.
-- It is a header byte and the algorithm's fields (see head_tb, head_gc,
-- head_fw, head_sw), then the loans, each (see pack_loan) a kind byte
-- (bits 0-1: the width of lent; 2-3: of the expiry; 4-5: of the last
-- spend; 64: a holder; 128: a last spend), the holder (the Store's 8-byte
-- digest of the Lessee ID; none for an ended loan), lent, and for
-- token_bucket and gcra the expiry and last spend as zigzag distances from
-- the key's reference time (its 'u', or gcra's TAT): a few bytes each.
local W = {[0] = 'I1', 'I2', 'I4', 'I7'}

-- wc is the width code of a non-negative integer x < 2^53.
local function wc(x)
  if x < 256 then return 0 elseif x < 65536 then return 1 elseif x < 4294967296 then return 2 end
  return 3
end

-- zz maps an integer of either sign to a non-negative one (zigzag), and
-- unzz back.
local function zz(x)
  if x >= 0 then return 2 * x end
  return -2 * x - 1
end
local function unzz(z)
  if z % 2 == 0 then return z / 2 end
  return -(z + 1) / 2
end

-- The heads: token_bucket's header is 1 + 2*(width of '$') with the
-- last call ('#', a uint32) and its grant ('$'), 0 without; then the
-- level 't' (a double) and its time 'u'; gcra's the same around the TAT
-- 't' alone; the windows' header holds the widths of their counts, then
-- the window start 'w', the count 'c' (and sliding_window's previous 'p').
local function head_tb(t, u, call, grant)
  if call == 0 then return struct.pack('<BdI7', 0, t, u) end
  local c = wc(grant)
  return struct.pack('<BdI7I4' .. W[c], 1 + 2 * c, t, u, call, grant)
end
local function head_gc(tat, call, grant)
  if call == 0 then return struct.pack('<BI7', 0, tat) end
  local c = wc(grant)
  return struct.pack('<BI7I4' .. W[c], 1 + 2 * c, tat, call, grant)
end
local function head_fw(w, c)
  local cc = wc(c)
  return struct.pack('<BI7' .. W[cc], cc, w, c)
end
local function head_sw(w, c, p)
  local cc, pc = wc(c), wc(p)
  return struct.pack('<BI7' .. W[cc] .. W[pc], cc + 4 * pc, w, c, p)
end

-- pack_loan is one loan's bytes (see above): a windowed loan is its
-- holder and lent; a token_bucket or gcra loan adds its expiry, and its
-- last spend when known (> 0), as zigzag distances from ref.
local function pack_loan(id, lent, exp, last, ref, windowed)
  local cl = wc(lent)
  if windowed then return struct.pack('<Bc8' .. W[cl], 64 + cl, id, lent) end
  local d1 = zz(exp - ref)
  local c1 = wc(d1)
  if id == '' then return struct.pack('<B' .. W[cl] .. W[c1], cl + 4 * c1, lent, d1) end
  if last > 0 then
    local d2 = zz(ref - last)
    local c2 = wc(d2)
    return struct.pack('<Bc8' .. W[cl] .. W[c1] .. W[c2], 192 + cl + 4 * c1 + 16 * c2, id, lent, d1, d2)
  end
  return struct.pack('<Bc8' .. W[cl] .. W[c1], 64 + cl + 4 * c1, id, lent, d1)
end

-- last_of is the last call ('#') and grant ('$') a call of holder that
-- granted g leaves in a token_bucket or gcra key: 0, 0 when the call was
-- not told apart. Mirrors lease's lastCallOf.
local function last_of(call, g)
  if call ~= 0 and holder ~= '' then return call, g end
  return 0, 0
end

-- The general path's helpers: a script defines them (loans()) only when
-- its fast path does not answer, since a closure costs Redis more than a
-- fast path's arithmetic.
local unpack_loan, read, write, find, after, lent_to, settle, last_call,
  unanswered, tat_back, held_of, end_loan, retire, take, split,
  keep_of, effective, settling, trim, cap_level, full_in, floor_tat,
  max_ended
local function loans()
  -- unpack_loan reads the loan at pos of v: id ('' for an ended loan), lent,
  -- exp, last (0: unknown; windowed: 0, 0), and the position after it.
  function unpack_loan(v, pos, ref, windowed)
    local kind
    kind, pos = struct.unpack('<B', v, pos)
    local id, lent, d1, d2 = '', 0, nil, nil
    local f = '<'
    if kind >= 64 then f = f .. 'c8' end
    f = f .. W[kind % 4]
    if not windowed then f = f .. W[math.floor(kind / 4) % 4] end
    if kind >= 128 then
      id, lent, d1, d2, pos = struct.unpack(f .. W[math.floor(kind / 16) % 4], v, pos)
    elseif kind >= 64 and windowed then
      id, lent, pos = struct.unpack(f, v, pos)
    elseif kind >= 64 then
      id, lent, d1, pos = struct.unpack(f, v, pos)
    else
      lent, d1, pos = struct.unpack(f, v, pos)
    end
    if windowed then return id, lent, 0, 0, pos end
    local exp, last = ref + unzz(d1), 0
    if d2 then last = ref - unzz(d2) end
    return id, lent, exp, last, pos
  end

  -- read decodes v (the key's value; false or nil: no state) of algorithm
  -- alg ('tb', 'gc', 'fw', 'sw'): its fields as a table of numbers by name
  -- ('t', 'u', '#', '$', 'w', 'c', 'p'), and its loans as a list of {id,
  -- lent, exp, last}.
  function read(v, alg)
    local st, ls = {}, {}
    if not v then return st, ls end
    local h, pos, ref
    if alg == 'tb' then
      h, st.t, st.u, pos = struct.unpack('<BdI7', v)
      ref = st.u
    elseif alg == 'gc' then
      h, st.t, pos = struct.unpack('<BI7', v)
      ref = st.t
    elseif alg == 'fw' then
      h, st.w, pos = struct.unpack('<BI7', v)
      st.c, pos = struct.unpack('<' .. W[h % 4], v, pos)
    else
      h, st.w, pos = struct.unpack('<BI7', v)
      st.c, st.p, pos = struct.unpack('<' .. W[h % 4] .. W[math.floor(h / 4) % 4], v, pos)
    end
    if (alg == 'tb' or alg == 'gc') and h % 2 == 1 then
      st['#'], st['$'], pos = struct.unpack('<I4' .. W[math.floor(h / 2) % 4], v, pos)
    end
    local windowed = alg == 'fw' or alg == 'sw'
    local size = #v
    while pos <= size do
      local id, l, e, last
      id, l, e, last, pos = unpack_loan(v, pos, ref, windowed)
      ls[#ls + 1] = {id = id, lent = l, exp = e, last = last}
    end
    return st, ls
  end

  -- write replaces the key with head (the packed fields) and the loans ls
  -- (packed against ref), expiring in ttl_ms (nil: keeping its expiry).
  function write(head, ls, ref, windowed, ttl_ms)
    local parts = {head}
    for _, l in ipairs(ls) do
      parts[#parts + 1] = pack_loan(l.id, l.lent, l.exp, l.last, ref, windowed)
    end
    local v = table.concat(parts)
    if ttl_ms then
      redis.call('SET', key, v, 'PX', ttl_ms)
    else
      redis.call('SET', key, v, 'KEEPTTL')
    end
  end

  function find(ls, id)
    for i, l in ipairs(ls) do
      if l.id == id then return i end
    end
    return nil
  end

  -- after is A(e): the tokens of the loans expiring at or after e.
  function after(ls, e)
    local a = 0
    for _, l in ipairs(ls) do
      if l.exp >= e then a = a + l.lent end
    end
    return a
  end

  -- lent_to is what ls lends id at t (t < 0 for windowed loans).
  function lent_to(ls, id, t)
    if id == '' then return 0 end
    local i = find(ls, id)
    if i and ls[i].exp > t then return ls[i].lent end
    return 0
  end

  -- settle records a call of holder at t that granted g: its loan becomes
  -- keep + g, expiring at max(its expiry, t + ttl), its last spend t -
  -- idle_us (windowed: expiry and last spend 0). Mirrors loans.settle.
  function settle(ls, keep, g, t, ttl_us, idle_us, windowed)
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
  function last_call(st)
    return st['#'] or 0, st['$'] or 0
  end

  -- unanswered handles a call of holder at t that names its previous call
  -- unans as unanswered (0: none): if that call is the key's last call
  -- (last_c, granting last_g), its grant never reached the holder. It takes
  -- that off holder's loan and returns it: what the key gets back. The loan
  -- runs on, even at 0. Mirrors loans.unanswered.
  function unanswered(ls, unans, last_c, last_g, t)
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
  function tat_back(tat, n, t)
    local base = math.max(tat, t)
    return base - math.min(math.floor(n * pf / lf), base - t)
  end

  -- held_of is what a windowed grant keeps of holder's loan: min(lent, held).
  function held_of(ls, held)
    local i = find(ls, holder)
    if holder == '' or not i then return 0 end
    return math.min(ls[i].lent, held)
  end

  -- end_loan ends holder's loan at t by a return of n: min(n, lent) goes
  -- back (returned), the rest counts as spent at t (an ended loan). Mirrors
  -- loans.end.
  function end_loan(ls, n, t)
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
  function retire(ls, t)
    for i, l in ipairs(ls) do
      if l.id ~= '' and l.exp <= t then
        ls[i] = {id = '', lent = l.lent, exp = l.exp, last = 0}
      end
    end
    return ls
  end

  -- take removes holder's loan and returns what a return of n gives back:
  -- min(n, lent).
  function take(ls, n)
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
  function split(ls, held, idle_us, spent_before, t)
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
  function keep_of(ls, sp, t, g)
    if not sp.i or ls[sp.i].exp <= t then return 0 end
    if g > 0 then return sp.run end
    return sp.run + sp.late
  end

  -- effective is ls as the caller sees it at t: the tokens of its loan it no
  -- longer holds count from when they were spent (see split) like loans
  -- that ended then, or at the loan's end if earlier. ls is not changed.
  -- Mirrors loans.effective.
  function effective(ls, sp, t)
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
  function settling(ls, sp, t, granted)
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
  max_ended = 3

  -- trim drops the ended loans that no longer cap anything at t, oldest
  -- first; merges the ended loans of the same time; and while more than
  -- max_ended remain hands the oldest to bake and drops it. binding(l, a)
  -- and bake(l, a) get the loan and A(its expiry). Mirrors loans.trim.
  function trim(ls, binding, bake)
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
  function cap_level(ls, level, t)
    for _, l in ipairs(ls) do
      local s = math.min(l.exp, t)
      level = math.min(level, cf - after(ls, l.exp) + (t - s) * lf / pf)
    end
    return level
  end

  -- full_in is how long after t a token_bucket full in d µs by refill
  -- alone is full with its loans counted (running and ended).
  function full_in(ls, d, t)
    for _, l in ipairs(ls) do
      d = math.max(d, (l.exp - t) + after(ls, l.exp) * pf / lf)
    end
    return d
  end

  -- floor_tat is the lowest TAT a gcra key's loans allow at t.
  function floor_tat(ls, t)
    local f = 0
    for _, l in ipairs(ls) do
      local s = math.min(l.exp, t)
      f = math.max(f, s + math.ceil(after(ls, l.exp) * pf / lf))
    end
    return f
  end
end
