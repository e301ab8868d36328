-- leased: joined after the prelude in front of the eight lease and return
-- scripts. It parses their common arguments and holds the loan helpers,
-- which mirror lease/loans.go operation for operation.
--
-- ARGV     limit, period_us, capacity, holder, then per script:
--          lease:  want, need, held, ttl_us, idle_us, spent_before, call,
--                  unanswered (Lessee.Call, Lessee.Unanswered; 0: none),
--                  ahead_windows, ahead_tokens (Lessee.AheadWindows and
--                  AheadTokens; fixed_window only)
--          return: tokens
--
-- A loan is what the Store lent one holder and still counts against the
-- key's capacity: its lent tokens and, for token_bucket and gcra, its
-- expiry and the holder's last spend before its last call
-- (lease.Loan.LastSpend; windowed loans end with their window), and for
-- fixed_window its share of each later window up to the end of the last
-- one (lease.Loan.Share and Expires). An ended loan has no holder: its
-- tokens were spent by its expiry, which still caps the level.
local lf, pf, cf = ARGV[1] + 0, ARGV[2] + 0, ARGV[3] + 0
local holder = ARGV[4]

-- A key's state is one binary string (struct.pack, little-endian; GET,
-- then SET: one read and one write per call, no number printed or parsed
-- as text), as small as its values allow: integers (times in µs, counts,
-- lent tokens) take 1, 2, 4 or 7 bytes (width codes 0-3, I1 I2 I4 I7,
-- named in header and kind bytes), only token_bucket's level is a double.
-- It is a header byte and the algorithm's fields (see head), then the
-- loans, each (see pack_loan) a kind byte (bits 0-1: the width of lent;
-- 2-3: of the expiry; 4-5: of the last spend; 64: a holder; 128: a last
-- spend), the holder (the Store's 8-byte digest of the Lessee ID; none
-- for an ended loan), lent, and for token_bucket and gcra the expiry and
-- last spend as zigzag distances from the key's reference time (its 'u',
-- or gcra's TAT): a few bytes each. A fixed_window loan with a share
-- ahead has bit 128 (bits 2-3: the width of the share; 4-5: of its end)
-- and adds the share and the end of the last window it covers, as µs
-- after the key's window start 'w' (always after it: a share ends at
-- least a window after the window it was lent in, and a later window
-- keeps only the shares that cover it); 5 bytes more for a per-second
-- window's share of a few tokens a few windows ahead.
local W = {[0] = 'I1', 'I2', 'I4', 'I7', 1, 2, 4, 7} -- and W[4 + code]: the bytes

-- head is the packed fields of algorithm alg, each integer's width code
-- c (0-3: < 2^8, < 2^16, < 2^32, else) in the header byte. token_bucket
-- (alg 'tb'; a, b, c, d: the level 't', a double, its time 'u', the last
-- call '#', a uint32, and its grant '$'): header 1 + 2*c('$') with the
-- last call, 0 without (call 0); gcra ('gc'; a, b, c: the TAT 't', the
-- last call and its grant) the same; the windows ('fw', 'sw'; a, b, c:
-- the window start 'w', the count 'c', and sliding_window's previous
-- 'p') c('c') + 4*c('p').
local function head(alg, a, b, c, d)
  local x, f = d, '<BI7' -- x: the one number whose width the header names first
  if alg == 'tb' then
    if c == 0 then return struct.pack('<BdI7', 0, a, b) end
  elseif alg == 'gc' then
    if b == 0 then return struct.pack('<BI7', 0, a) end
    x = c
  else
    x = b
  end
  local w = 3
  if x < 256 then w = 0 elseif x < 65536 then w = 1 elseif x < 4294967296 then w = 2 end
  if alg == 'tb' then return struct.pack('<BdI7I4' .. W[w], 1 + 2 * w, a, b, c, d) end
  if alg == 'gc' then return struct.pack('<BI7I4' .. W[w], 1 + 2 * w, a, b, c) end
  if alg == 'fw' then return struct.pack(f .. W[w], w, a, b) end
  local w2 = 3
  if c < 256 then w2 = 0 elseif c < 65536 then w2 = 1 elseif c < 4294967296 then w2 = 2 end
  return struct.pack(f .. W[w] .. W[w2], w + 4 * w2, a, b, c)
end

-- pack_loan is one loan's bytes (see above): a windowed loan is its
-- holder and lent, and for fixed_window a share ahead (last > 0: the
-- share, exp its end) with its end as µs after ref (the window start); a
-- token_bucket or gcra loan adds its expiry, and its last spend when
-- known (> 0), as zigzag distances from ref.
local function pack_loan(id, lent, exp, last, ref, windowed)
  -- wc and zz written out: a function call costs more than the compares
  local cl = 3
  if lent < 256 then cl = 0 elseif lent < 65536 then cl = 1 elseif lent < 4294967296 then cl = 2 end
  if windowed then
    if last == 0 then return struct.pack('<Bc8' .. W[cl], 64 + cl, id, lent) end
    local d = exp - ref
    local cs, ce = 3, 3
    if last < 256 then cs = 0 elseif last < 65536 then cs = 1 elseif last < 4294967296 then cs = 2 end
    if d < 256 then ce = 0 elseif d < 65536 then ce = 1 elseif d < 4294967296 then ce = 2 end
    return struct.pack('<Bc8' .. W[cl] .. W[cs] .. W[ce], 192 + cl + 4 * cs + 16 * ce, id, lent, last, d)
  end
  local d1 = exp - ref
  if d1 >= 0 then d1 = 2 * d1 else d1 = -2 * d1 - 1 end
  local c1 = 3
  if d1 < 256 then c1 = 0 elseif d1 < 65536 then c1 = 1 elseif d1 < 4294967296 then c1 = 2 end
  if id == '' then return struct.pack('<B' .. W[cl] .. W[c1], cl + 4 * c1, lent, d1) end
  if last > 0 then
    local d2 = ref - last
    if d2 >= 0 then d2 = 2 * d2 else d2 = -2 * d2 - 1 end
    local c2 = 3
    if d2 < 256 then c2 = 0 elseif d2 < 65536 then c2 = 1 elseif d2 < 4294967296 then c2 = 2 end
    return struct.pack('<Bc8' .. W[cl] .. W[c1] .. W[c2], 192 + cl + 4 * c1 + 16 * c2, id, lent, d1, d2)
  end
  return struct.pack('<Bc8' .. W[cl] .. W[c1], 64 + cl + 4 * c1, id, lent, d1)
end

-- last_of is the last call ('#') and grant ('$') a call of holder that
-- granted g leaves in a token_bucket or gcra key whose last ones were pc
-- and pg: 0, 0 when the call was not told apart; pc, pg for a call
-- without a holder, which settles no loan. Mirrors lease's lastCallOf.
local function last_of(call, g, pc, pg)
  if holder == '' then return pc, pg end
  if call ~= 0 then return call, g end
  return 0, 0
end

-- loans returns the general path's helpers (H.read, H.trim, ...): a
-- script creates them only when its fast path does not answer, since a
-- closure costs Redis more than a fast path's arithmetic (and one that
-- captures many of the chunk's locals more still: hence a table, not
-- upvalues).
--
-- A list of loans is one flat table, four entries per loan from base b
-- (0, 4, 8, ...): ls[b+1] the holder ('' for an ended loan), ls[b+2]
-- lent, ls[b+3] the expiry, ls[b+4] the last spend (token_bucket, gcra)
-- or the share ahead (fixed_window; ls[b+3] its end, 0 without a share):
-- no table per loan.
-- A loan is named by its base; its order in the list is lease/loans.go's
-- (appended at the end, removed by moving the last loan into its place).
local max_ended = 3 -- the ended loans a key keeps (lease's maxEnded)
local function loans()
  local function unzz(z)
    if z % 2 == 0 then return z / 2 end
    return -(z + 1) / 2
  end

  -- read decodes v (the key's value; false or nil: no state) of
  -- algorithm alg ('tb', 'gc', 'fw', 'sw'): its fields as a table of
  -- numbers by name ('t', 'u', '#', '$', 'w', 'c', 'p'), and its loans.
  local function read(v, alg)
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
      ref = st.w
    else
      h, st.w, pos = struct.unpack('<BI7', v)
      st.c, st.p, pos = struct.unpack('<' .. W[h % 4] .. W[math.floor(h / 4) % 4], v, pos)
    end
    if (alg == 'tb' or alg == 'gc') and h % 2 == 1 then
      st['#'], st['$'], pos = struct.unpack('<I4' .. W[math.floor(h / 2) % 4], v, pos)
    end
    local windowed = alg == 'fw' or alg == 'sw'
    local size, n = #v, 0
    while pos <= size do
      local kind = string.byte(v, pos)
      local id, lent, d1, d2 = '', 0, nil, nil
      local wl, w1 = W[kind % 4], W[math.floor(kind / 4) % 4]
      if kind >= 128 and windowed then -- a fixed_window share ahead
        local share, d
        id, lent, share, d, pos = struct.unpack('<c8' .. wl .. w1 .. W[math.floor(kind / 16) % 4], v, pos + 1)
        d1, d2 = ref + d, share
      elseif windowed then
        id, lent, pos = struct.unpack('<c8' .. wl, v, pos + 1)
      elseif kind >= 128 then
        id, lent, d1, d2, pos = struct.unpack('<c8' .. wl .. w1 .. W[math.floor(kind / 16) % 4], v, pos + 1)
      elseif kind >= 64 then
        id, lent, d1, pos = struct.unpack('<c8' .. wl .. w1, v, pos + 1)
      else
        lent, d1, pos = struct.unpack('<' .. wl .. w1, v, pos + 1)
      end
      local exp, last = 0, 0
      if windowed then
        if d1 then exp, last = d1, d2 end
      else
        if d1 then exp = ref + unzz(d1) end
        if d2 then last = ref - unzz(d2) end
      end
      ls[n + 1], ls[n + 2], ls[n + 3], ls[n + 4] = id, lent, exp, last
      n = n + 4
    end
    return st, ls
  end

  -- write replaces the key with head (the packed fields) and the loans ls
  -- (packed against ref), expiring in ttl_ms (nil: keeping its expiry).
  local function write(head, ls, ref, windowed, ttl_ms)
    local parts = {head}
    for b = 0, #ls - 4, 4 do
      parts[#parts + 1] = pack_loan(ls[b + 1], ls[b + 2], ls[b + 3], ls[b + 4], ref, windowed)
    end
    local v = table.concat(parts)
    if ttl_ms then
      redis.call('SET', key, v, 'PX', ttl_ms)
    else
      redis.call('SET', key, v, 'KEEPTTL')
    end
  end

  -- find is the base of id's loan, or nil.
  local function find(ls, id)
    for b = 0, #ls - 4, 4 do
      if ls[b + 1] == id then return b end
    end
    return nil
  end

  -- after is A(e): the tokens of the loans expiring at or after e.
  local function after(ls, e)
    local a = 0
    for b = 0, #ls - 4, 4 do
      if ls[b + 3] >= e then a = a + ls[b + 2] end
    end
    return a
  end

  -- lent_to is what ls lends id at t (t < 0 for windowed loans).
  local function lent_to(ls, id, t)
    if id == '' then return 0 end
    local b = find(ls, id)
    if b and ls[b + 3] > t then return ls[b + 2] end
    return 0
  end

  -- remove removes the loan at b (the last loan takes its place).
  local function remove(ls, b)
    local n = #ls
    ls[b + 1], ls[b + 2], ls[b + 3], ls[b + 4] = ls[n - 3], ls[n - 2], ls[n - 1], ls[n]
    ls[n], ls[n - 1], ls[n - 2], ls[n - 3] = nil, nil, nil, nil
  end

  -- append adds a loan at the end.
  local function append(ls, id, lent, exp, last)
    local n = #ls
    ls[n + 1], ls[n + 2], ls[n + 3], ls[n + 4] = id, lent, exp, last
  end

  -- settle records a call of holder at t that granted g: its loan becomes
  -- keep + g, expiring at max(its expiry, t + ttl), its last spend t -
  -- idle_us (windowed: expiry 0, and a fixed_window share kept for
  -- set_ahead to set). Mirrors loans.settle.
  local function settle(ls, keep, g, t, ttl_us, idle_us, windowed)
    if holder == '' then return ls end
    local b = find(ls, holder)
    local lent = keep + g
    local exp, last = 0, 0
    if not windowed then
      exp, last = t + ttl_us, t - idle_us
      if b then exp = math.max(exp, ls[b + 3]) end
    elseif b then
      last = ls[b + 4]
    end
    if b and lent > 0 then
      ls[b + 2], ls[b + 3], ls[b + 4] = lent, exp, last
    elseif b then
      remove(ls, b)
    elseif lent > 0 then
      append(ls, holder, lent, exp, last)
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
  -- (last_c, granting last_g), its grant never reached the holder. It
  -- takes that off holder's loan and returns it: what the key gets back.
  -- The loan runs on, even at 0. Mirrors loans.unanswered.
  local function unanswered(ls, unans, last_c, last_g, t)
    if unans == 0 or holder == '' or last_c ~= unans then return 0 end
    local b = find(ls, holder)
    if not b or ls[b + 3] <= t then return 0 end
    local back = math.min(last_g, ls[b + 2])
    ls[b + 2] = ls[b + 2] - back
    return back
  end

  -- tat_back is a gcra TAT after n tokens come back at t (a return, or an
  -- unanswered call's grant): max(t, max(tat, t) - floor(n*P/L)). Mirrors
  -- lease's tatBack.
  local function tat_back(tat, n, t)
    local base = math.max(tat, t)
    return base - math.min(math.floor(n * pf / lf), base - t)
  end

  -- held_of is what a windowed grant keeps of holder's loan: min(lent,
  -- held).
  local function held_of(ls, held)
    local b = find(ls, holder)
    if holder == '' or not b then return 0 end
    return math.min(ls[b + 2], held)
  end

  -- end_loan ends holder's loan at t by a return of n: min(n, lent) goes
  -- back (returned), the rest counts as spent at t (an ended loan).
  -- Mirrors loans.end.
  local function end_loan(ls, n, t)
    local b = find(ls, holder)
    if holder == '' or not b then return ls, 0 end
    local back = math.min(n, ls[b + 2])
    local rest = ls[b + 2] - back
    if rest > 0 then
      ls[b + 1], ls[b + 2], ls[b + 3], ls[b + 4] = '', rest, math.min(ls[b + 3], t), 0
      return ls, back
    end
    remove(ls, b)
    return ls, back
  end

  -- retire turns the holders' loans that ended by t into ended loans (no
  -- holder). Mirrors loans.retire.
  local function retire(ls, t)
    for b = 0, #ls - 4, 4 do
      if ls[b + 1] ~= '' and ls[b + 3] <= t then
        ls[b + 1], ls[b + 4] = '', 0
      end
    end
    return ls
  end

  -- take removes holder's loan and returns what a return of n gives
  -- back: min(n, lent).
  local function take(ls, n)
    local b = find(ls, holder)
    if holder == '' or not b then return ls, 0 end
    local back = math.min(n, ls[b + 2])
    remove(ls, b)
    return ls, back
  end

  -- split is how the caller (holding held, idle for idle_us, reporting
  -- spent_before) sees its loan at t: its base (nil without a loan), run,
  -- early, late, early_at, late_at. Mirrors loans.split.
  local function split(ls, held, idle_us, spent_before, t)
    local b = nil
    if holder ~= '' then b = find(ls, holder) end
    if not b then return nil, 0, 0, 0, 0, 0 end
    local lent = ls[b + 2]
    local run = math.min(lent, held)
    local early = math.min(spent_before, lent - run)
    local late_at = t - idle_us
    local early_at = late_at
    if ls[b + 4] > 0 then early_at = math.min(ls[b + 4], late_at) end
    return b, run, early, lent - run - early, early_at, late_at
  end

  -- keep_of is what a call at t that granted g keeps of the split loan
  -- at b (settle): nothing of one that ended; run after a grant; run +
  -- late otherwise. Mirrors split.keep.
  local function keep_of(ls, b, run, late, t, g)
    if not b or ls[b + 3] <= t then return 0 end
    if g > 0 then return run end
    return run + late
  end

  -- effective is a copy of ls as the caller sees it at t: the tokens of
  -- its loan (at b, split into run, early, late) it no longer holds count
  -- from when they were spent like loans that ended then, or at the
  -- loan's end if earlier. ls itself (returned when nothing differs) is
  -- not changed. Mirrors loans.effective.
  local function effective(ls, b, run, early, late, early_at, late_at, t)
    if not b or run == ls[b + 2] then return ls end
    local e = math.min(ls[b + 3], t)
    local out = {}
    for k = 1, #ls do
      out[k] = ls[k]
    end
    out[b + 2] = run
    if early == 0 then
      -- nothing
    elseif early_at < e then
      append(out, '', early, early_at, 0)
    else
      out[b + 2] = out[b + 2] + early
    end
    if late == 0 then
      -- nothing
    elseif late_at < e then
      append(out, '', late, late_at, 0)
    else
      out[b + 2] = out[b + 2] + late
    end
    return out
  end

  -- settling changes ls as a write at t that settles holder's split loan
  -- (at b) leaves it: the kept part runs until its expiry, the settled
  -- parts (early, and late after a grant) become ended loans. Mirrors
  -- loans.settling (in place: the caller's ls is the settled one).
  local function settling(ls, b, run, early, late, early_at, late_at, t, granted)
    if not b or run == ls[b + 2] then return ls end
    local exp = ls[b + 3]
    local e = math.min(exp, t)
    ls[b + 2] = run
    if early > 0 then
      append(ls, '', early, math.min(early_at, e), 0)
    end
    if late == 0 then
      -- nothing
    elseif granted or exp <= t then
      append(ls, '', late, math.min(late_at, e), 0)
    else
      ls[b + 2] = ls[b + 2] + late -- kept lent
    end
    return ls
  end

  -- trim drops the ended loans that no longer cap anything at t, oldest
  -- first; merges the ended loans of the same time; and while more than
  -- max_ended remain bakes the oldest's cap into x and drops it. x is the
  -- stored level (alg 'tb': a loan's cap at t is C - A(E) + (t - E)*L/P,
  -- binding below C, baked as min) or the TAT (alg 'gc': E + ceil(A(E)*P/L),
  -- binding after t, baked as max); trim returns ls and x. Mirrors
  -- loans.trim.
  local function trim(ls, t, alg, x)
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
      if not oldest then return ls, x end
      local e = ls[oldest + 3]
      local a = after(ls, e)
      local c, binding
      if alg == 'tb' then
        c = cf - a + (t - e) * lf / pf
        binding = c < cf
      else
        c = e + math.ceil(a * pf / lf)
        binding = c > t
      end
      if binding then
        if n <= max_ended then return ls, x end
        if alg == 'tb' then x = math.min(x, c) else x = math.max(x, c) end
      end
      remove(ls, oldest)
    end
  end

  -- cap_level caps a token_bucket level at t by the loans: at most
  -- C - A(E) + (t - min(E, t))*L/P for every loan.
  local function cap_level(ls, level, t)
    for b = 0, #ls - 4, 4 do
      local e = ls[b + 3]
      local s = e -- min(e, t), min(level, c): without a C call each
      if t < s then s = t end
      local c = cf - after(ls, e) + (t - s) * lf / pf
      if c < level then level = c end
    end
    return level
  end

  -- full_in is how long after t a token_bucket full in d µs by refill
  -- alone is full with its loans counted (running and ended).
  local function full_in(ls, d, t)
    for b = 0, #ls - 4, 4 do
      local e = ls[b + 3]
      local c = (e - t) + after(ls, e) * pf / lf
      if c > d then d = c end
    end
    return d
  end

  -- floor_tat is the lowest TAT a gcra key's loans allow at t.
  local function floor_tat(ls, t)
    local f = 0
    for b = 0, #ls - 4, 4 do
      local e = ls[b + 3]
      local s = e
      if t < s then s = t end
      local c = s + math.ceil(after(ls, e) * pf / lf)
      if c > f then f = c end
    end
    return f
  end

  -- spent_by is the later of e and every loan's expiry plus what its
  -- tokens A(E) are worth at the key's rate: when a gcra key's TAT (e)
  -- and loans are all past.
  local function spent_by(ls, e)
    for b = 0, #ls - 4, 4 do
      local x = ls[b + 3]
      local c = x + math.ceil(after(ls, x) * pf / lf)
      if c > e then e = c end
    end
    return e
  end
  -- roll makes the window of t a fixed_window key's window (st.w, st.c)
  -- if it is later than st.w (none: no state): the loans whose share
  -- covers it (ending at or after its end) lend their share in it, the
  -- others go, and its count is the sum of those shares; it returns the
  -- loans (a new list when the window changed). A stored window later
  -- than t's (a clock that went back) stays. Mirrors
  -- FixedWindowState.roll.
  local function roll(st, ls, t)
    local ws = t - math.fmod(t, pf)
    if st.w and st.w >= ws then return ls end
    st.w, st.c = ws, 0
    local out = {}
    for b = 0, #ls - 4, 4 do
      if ls[b + 4] > 0 and ls[b + 3] >= ws + pf then
        append(out, ls[b + 1], ls[b + 4], ls[b + 3], ls[b + 4])
        st.c = st.c + ls[b + 4]
      end
    end
    return out
  end

  -- set_ahead sets holder's shares ahead of the fixed_window window
  -- starting at ws, asked aw windows of at tokens: min(at, L - the other
  -- holders' shares that cover windows after it) in each of the next aw
  -- windows, none when that is 0 or aw is 0. It returns the loans, the
  -- tokens and windows lent ahead, and whether the loans changed; a loan
  -- left with nothing lent and no share goes. Mirrors
  -- FixedWindowState.setAhead and aheadOf.
  local function set_ahead(ls, ws, aw, at)
    local tokens, windows = 0, 0
    if aw > 0 then
      local a = 0 -- the others' shares ahead
      for b = 0, #ls - 4, 4 do
        if ls[b + 1] ~= holder and ls[b + 4] > 0 and ls[b + 3] > ws + pf then a = a + ls[b + 4] end
      end
      tokens = math.max(0, math.min(at, lf - a))
    end
    if tokens > 0 then windows = aw end
    local e = ws + (windows + 1) * pf
    local b = find(ls, holder)
    if b and ls[b + 4] == tokens and (tokens == 0 or ls[b + 3] == e) then return ls, tokens, windows, false end
    if not b then
      if tokens == 0 then return ls, 0, 0, false end
      append(ls, holder, 0, e, tokens)
    elseif tokens > 0 then
      ls[b + 3], ls[b + 4] = e, tokens
    elseif ls[b + 2] > 0 then
      ls[b + 3], ls[b + 4] = 0, 0
    else
      remove(ls, b)
    end
    return ls, tokens, windows, true
  end

  -- fw_expiry is when a fixed_window key of window ws and loans ls stops
  -- mattering: two windows after ws, or a window after the end of the
  -- last window a share covers, whichever is later. Mirrors
  -- FixedWindowState.expiry.
  local function fw_expiry(ws, ls)
    local e = ws + 2 * pf
    for b = 0, #ls - 4, 4 do
      if ls[b + 4] > 0 and ls[b + 3] + pf > e then e = ls[b + 3] + pf end
    end
    return e
  end
  return {roll = roll, set_ahead = set_ahead, fw_expiry = fw_expiry, read = read, write = write, find = find, after = after, lent_to = lent_to, remove = remove, append = append, settle = settle, last_call = last_call, unanswered = unanswered, tat_back = tat_back, held_of = held_of, end_loan = end_loan, retire = retire, take = take, split = split, keep_of = keep_of, effective = effective, settling = settling, trim = trim, cap_level = cap_level, full_in = full_in, floor_tat = floor_tat, spent_by = spent_by}
end
