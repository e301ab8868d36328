-- leased: joined after the prelude in front of the eight lease and return
-- scripts. It parses their common arguments and holds the loan helpers,
-- which mirror lease/algo/loans.go operation for operation.
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
-- A global costs Redis a lookup in its protected table of globals at
-- every use: the struct library's functions as locals.
local spack, sunpack = struct.pack, struct.unpack

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
-- known (> 0), as zigzag distances from ref. F, when given, keeps the
-- formats by kind byte, for a call that packs many loans (a format built
-- costs Redis more than a table lookup).
local function pack_loan(id, lent, exp, last, ref, windowed)
  -- wc and zz written out: a function call costs more than the compares
  local cl = 3
  if lent < 256 then cl = 0 elseif lent < 65536 then cl = 1 elseif lent < 4294967296 then cl = 2 end
  if windowed then
    if last == 0 then return spack('<Bc8' .. W[cl], 64 + cl, id, lent) end
    local d = exp - ref
    local cs, ce = 3, 3
    if last < 256 then cs = 0 elseif last < 65536 then cs = 1 elseif last < 4294967296 then cs = 2 end
    if d < 256 then ce = 0 elseif d < 65536 then ce = 1 elseif d < 4294967296 then ce = 2 end
    return spack('<Bc8' .. W[cl] .. W[cs] .. W[ce], 192 + cl + 4 * cs + 16 * ce, id, lent, last, d)
  end
  local d1 = exp - ref
  if d1 >= 0 then d1 = 2 * d1 else d1 = -2 * d1 - 1 end
  local c1 = 3
  if d1 < 256 then c1 = 0 elseif d1 < 65536 then c1 = 1 elseif d1 < 4294967296 then c1 = 2 end
  if id == '' then return spack('<B' .. W[cl] .. W[c1], cl + 4 * c1, lent, d1) end
  if last > 0 then
    local d2 = ref - last
    if d2 >= 0 then d2 = 2 * d2 else d2 = -2 * d2 - 1 end
    local c2 = 3
    if d2 < 256 then c2 = 0 elseif d2 < 65536 then c2 = 1 elseif d2 < 4294967296 then c2 = 2 end
    return spack('<Bc8' .. W[cl] .. W[c1] .. W[c2], 192 + cl + 4 * c1 + 16 * c2, id, lent, d1, d2)
  end
  return spack('<Bc8' .. W[cl] .. W[c1], 64 + cl + 4 * c1, id, lent, d1)
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

-- refill returns read_loans and write_loans, the general paths' decoding
-- and encoding of a token_bucket or gcra key's loans: created only when a
-- fast path does not answer (a closure costs Redis more than a fast
-- path's arithmetic).
--
-- read_loans(v, pos, ref, t) decodes the loans of value v from pos to its
-- end, their times zigzag distances from ref, into a list (see loans
-- below) by expiry, latest first, the loans of one time in their order:
-- the order a token_bucket or gcra key keeps them in (lease/algo/loans.go's
-- byExpiry), so that A(E), what the loans expiring at or after E lend, is
-- one running sum over them. The scripts write them so; a key an older
-- release wrote (which appended, and moved the last loan into a removed
-- one's place) is sorted once when read. It returns the list, the base of
-- holder's loan (nil without), and how many holders' loans run at t. Each
-- loan is one struct.unpack, which also reads the next loan's kind byte:
-- a C call costs Redis about as much as the loan's arithmetic.
--
-- write_loans(parts, ...) packs a key's loans into parts and says when
-- they are all past (see write below).
local function refill()
  local function by_expiry(ls)
    local idx = {}
    for b = 0, #ls - 4, 4 do
      idx[#idx + 1] = b
    end
    table.sort(idx, function(p, q)
      if ls[p + 3] ~= ls[q + 3] then return ls[p + 3] > ls[q + 3] end
      return p < q
    end)
    local out = {}
    for i = 1, #idx do
      local b, o = idx[i], 4 * (i - 1)
      out[o + 1], out[o + 2], out[o + 3], out[o + 4] = ls[b + 1], ls[b + 2], ls[b + 3], ls[b + 4]
    end
    return out
  end
  local function read(v, pos, ref, t)
    local ls, m, si, nh, sorted, size, prev = {}, 0, nil, 0, true, #v, math.huge
    if pos > size then return ls, nil, 0 end
    -- by kind byte: the format with the next loan's kind, the last
    -- loan's, the bytes after the kind
    local F, L, S = {}, {}, {}
    local kind = string.byte(v, pos)
    pos = pos + 1
    while kind do
      local k, f = kind, F[kind]
      if not f then
        local k4 = (k - k % 4) / 4 -- the width codes, without math.floor
        local c, c1, c2 = k % 4, k4 % 4, (k4 - k4 % 4) / 4 % 4
        local g, n = W[c] .. W[c1], W[4 + c] + W[4 + c1]
        if k >= 128 then
          g, n = 'c8' .. g .. W[c2], n + 8 + W[4 + c2]
        elseif k >= 64 then
          g, n = 'c8' .. g, n + 8
        end
        f = '<' .. g .. 'B'
        F[k], L[k], S[k] = f, '<' .. g, n
      end
      local id, lent, d1, d2
      if pos + S[k] <= size then -- another loan follows
        if k >= 128 then
          id, lent, d1, d2, kind, pos = sunpack(f, v, pos)
        elseif k >= 64 then
          id, lent, d1, kind, pos = sunpack(f, v, pos)
        else
          id, lent, d1, kind, pos = '', sunpack(f, v, pos)
        end
      else
        f, kind = L[k], nil
        if k >= 128 then
          id, lent, d1, d2, pos = sunpack(f, v, pos)
        elseif k >= 64 then
          id, lent, d1, pos = sunpack(f, v, pos)
        else
          id, lent, d1, pos = '', sunpack(f, v, pos)
        end
      end
      -- unzz written out; d2 the last spend (0: none)
      if not d2 then
        d2 = 0
      elseif d2 % 2 == 0 then
        d2 = ref - d2 / 2
      else
        d2 = ref + (d2 + 1) / 2
      end
      if d1 % 2 == 0 then d1 = ref + d1 / 2 else d1 = ref - (d1 + 1) / 2 end
      if d1 > prev then sorted = false end
      prev = d1
      ls[m + 1], ls[m + 2], ls[m + 3], ls[m + 4] = id, lent, d1, d2
      if id ~= '' then
        if d1 > t then nh = nh + 1 end
        if id == holder then si = m end
      end
      m = m + 4
    end
    if not sorted then
      ls, si = by_expiry(ls), nil
      for b = 0, #ls - 4, 4 do
        if holder ~= '' and ls[b + 1] == holder then si = b end
      end
    end
    return ls, si, nh
  end
  -- write packs the loans of ls up to base w (but the one at base skip)
  -- and, where its expiry puts it (after the loans expiring at or after
  -- it), the loan v (vid, vlent, vx, vlast; vlent 0: none) against ref
  -- (as pack_loan does) into parts, and returns when the key is all past:
  -- for alg 'tb' the latest of z and (E - t) + A(E)*P/L over the loans
  -- (full_in, µs after t), for 'gc' of z and E + ceil(A(E)*P/L)
  -- (spent_by): A(E) a running sum, one pass. (The caller's loan, which
  -- a call moves to a later expiry, is written so, not moved in ls.)
  local function write(parts, ls, w, skip, vid, vlent, vx, vlast, ref, t, alg, z)
    local F = {} -- the formats by kind byte
    local n, b, a, px = #parts, 0, 0, nil
    while true do
      local id, lent, x, last
      if vlent > 0 and (b >= w or ls[b + 3] < vx) then
        id, lent, x, last, vlent = vid, vlent, vx, vlast, 0
      elseif b >= w then
        break
      elseif b == skip then
        b = b + 4
      else
        id, lent, x, last = ls[b + 1], ls[b + 2], ls[b + 3], ls[b + 4]
        b = b + 4
      end
      if id then
        if px and x ~= px then -- the time before: all its loans counted
          local c
          if alg == 'tb' then c = (px - t) + a * pf / lf else c = px + math.ceil(a * pf / lf) end
          if c > z then z = c end
        end
        a, px = a + lent, x
        local d1 = x - ref -- pack_loan written out
        if d1 >= 0 then d1 = 2 * d1 else d1 = -2 * d1 - 1 end
        local cl, c1 = 3, 3
        if lent < 256 then cl = 0 elseif lent < 65536 then cl = 1 elseif lent < 4294967296 then cl = 2 end
        if d1 < 256 then c1 = 0 elseif d1 < 65536 then c1 = 1 elseif d1 < 4294967296 then c1 = 2 end
        local kind, f
        n = n + 1
        if id == '' then
          kind = cl + 4 * c1
          f = F[kind]
          if not f then
            f = '<B' .. W[cl] .. W[c1]
            F[kind] = f
          end
          parts[n] = spack(f, kind, lent, d1)
        elseif last > 0 then
          local d2 = ref - last
          if d2 >= 0 then d2 = 2 * d2 else d2 = -2 * d2 - 1 end
          local c2 = 3
          if d2 < 256 then c2 = 0 elseif d2 < 65536 then c2 = 1 elseif d2 < 4294967296 then c2 = 2 end
          kind = 192 + cl + 4 * c1 + 16 * c2
          f = F[kind]
          if not f then
            f = '<Bc8' .. W[cl] .. W[c1] .. W[c2]
            F[kind] = f
          end
          parts[n] = spack(f, kind, id, lent, d1, d2)
        else
          kind = 64 + cl + 4 * c1
          f = F[kind]
          if not f then
            f = '<Bc8' .. W[cl] .. W[c1]
            F[kind] = f
          end
          parts[n] = spack(f, kind, id, lent, d1)
        end
      end
    end
    if px then
      local c
      if alg == 'tb' then c = (px - t) + a * pf / lf else c = px + math.ceil(a * pf / lf) end
      if c > z then z = c end
    end
    return z
  end
  return read, write

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
-- A loan is named by its base; a token_bucket or gcra key's are by
-- expiry (see by_expiry), the windows' in the order they came; a loan
-- removed leaves the others in their order (lease/algo/loans.go's).
local max_ended = 3 -- the ended loans a key keeps (lease's maxEnded)
local function loans()
  -- read decodes v (the key's value; false or nil: no state) of
  -- algorithm alg ('tb', 'gc', 'fw', 'sw'): its fields as a table of
  -- numbers by name ('t', 'u', '#', '$', 'w', 'c', 'p'), and its loans
  -- (token_bucket's and gcra's by expiry).
  local function read(v, alg)
    local st, ls = {}, {}
    if not v then return st, ls end
    local h, pos, ref
    if alg == 'tb' or alg == 'gc' then
      if alg == 'tb' then
        h, st.t, st.u, pos = struct.unpack('<BdI7', v)
        ref = st.u
      else
        h, st.t, pos = struct.unpack('<BI7', v)
        ref = st.t
      end
      if h % 2 == 1 then
        st['#'], st['$'], pos = struct.unpack('<I4' .. W[math.floor(h / 2) % 4], v, pos)
      end
      ls = refill()(v, pos, ref, ref)
      return st, ls
    elseif alg == 'fw' then
      h, st.w, pos = struct.unpack('<BI7', v)
      st.c, pos = struct.unpack('<' .. W[h % 4], v, pos)
      ref = st.w
    else
      h, st.w, pos = struct.unpack('<BI7', v)
      st.c, st.p, pos = struct.unpack('<' .. W[h % 4] .. W[math.floor(h / 4) % 4], v, pos)
    end
    local size, n = #v, 0
    while pos <= size do
      local kind = string.byte(v, pos)
      local id, lent, exp, last = '', 0, 0, 0
      local wl, w1 = W[kind % 4], W[math.floor(kind / 4) % 4]
      if kind >= 128 then -- a fixed_window share ahead
        local d
        id, lent, last, d, pos = struct.unpack('<c8' .. wl .. w1 .. W[math.floor(kind / 16) % 4], v, pos + 1)
        exp = ref + d
      else
        id, lent, pos = struct.unpack('<c8' .. wl, v, pos + 1)
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
    if windowed then
      for b = 0, #ls - 4, 4 do
        parts[b / 4 + 2] = pack_loan(ls[b + 1], ls[b + 2], ls[b + 3], ls[b + 4], ref, true)
      end
    else
      local _, pack = refill()
      pack(parts, ls, #ls, nil, '', 0, 0, 0, ref, 0, 'tb', 0)
    end
    local v = table.concat(parts)
    if ttl_ms then
      redis.call('SET', key, v, 'PX', ttl_ms)
    else
      redis.call('SET', key, v, 'KEEPTTL')
    end
  end

  -- find is the base of id's loan, or nil (from the oldest, as
  -- loans.find).
  local function find(ls, id)
    for b = #ls - 4, 0, -4 do
      if ls[b + 1] == id then return b end
    end
    return nil
  end

  -- lent_to is what ls lends id at t (t < 0 for windowed loans).
  local function lent_to(ls, id, t)
    if id == '' then return 0 end
    local b = find(ls, id)
    if b and ls[b + 3] > t then return ls[b + 2] end
    return 0
  end

  -- remove removes the loan at b; the others keep their order.
  local function remove(ls, b)
    local n = #ls
    for k = b + 1, n - 4 do
      ls[k] = ls[k + 4]
    end
    ls[n], ls[n - 1], ls[n - 2], ls[n - 3] = nil, nil, nil, nil
  end

  -- append adds a loan at the end.
  local function append(ls, id, lent, exp, last)
    local n = #ls
    ls[n + 1], ls[n + 2], ls[n + 3], ls[n + 4] = id, lent, exp, last
  end

  -- place moves the loan at b, whose expiry changed, to where the order
  -- by expiry puts it: after the loans of its time. Mirrors loans.place.
  local function place(ls, b)
    local id, lent, exp, last = ls[b + 1], ls[b + 2], ls[b + 3], ls[b + 4]
    while b > 0 and ls[b - 1] < exp do
      ls[b + 1], ls[b + 2], ls[b + 3], ls[b + 4] = ls[b - 3], ls[b - 2], ls[b - 1], ls[b]
      b = b - 4
    end
    local n = #ls
    while b + 4 < n and ls[b + 7] >= exp do
      ls[b + 1], ls[b + 2], ls[b + 3], ls[b + 4] = ls[b + 5], ls[b + 6], ls[b + 7], ls[b + 8]
      b = b + 4
    end
    ls[b + 1], ls[b + 2], ls[b + 3], ls[b + 4] = id, lent, exp, last
  end

  -- settle records a windowed call of holder that granted g: its loan
  -- becomes keep + g, expiry 0 (a fixed_window share kept for set_ahead
  -- to set, with its end). Mirrors loans.settle (windowed).
  local function settle(ls, keep, g)
    if holder == '' then return ls end
    local b = find(ls, holder)
    local lent = keep + g
    if b and lent > 0 then
      ls[b + 2], ls[b + 3] = lent, 0
    elseif b then
      remove(ls, b)
    elseif lent > 0 then
      append(ls, holder, lent, 0, 0)
    end
    return ls
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
      place(ls, b)
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

  -- trim drops the ended loans that no longer cap anything at t, oldest
  -- first; merges the ended loans of the same time; and while more than
  -- max_ended remain bakes the oldest's cap into x and drops it. x is the
  -- stored level (alg 'tb': a loan's cap at t is C - A(E) + (t - E)*L/P,
  -- binding below C, baked as min) or the TAT (alg 'gc': E + ceil(A(E)*P/L),
  -- binding after t, baked as max); trim returns ls and x. The holders'
  -- loans that ended are retired (retire), so by expiry every ended loan
  -- comes after every holder's: those of one time are neighbours, the
  -- oldest is the last, and its A(E) all the loans lend. Mirrors
  -- loans.trim.
  local function trim(ls, t, alg, x)
    local w = 0 -- merge, in place: w is the base after the loans kept
    for b = 0, #ls - 4, 4 do
      if w > 0 and ls[b + 1] == '' and ls[w - 3] == '' and ls[w - 1] == ls[b + 3] then
        ls[w - 2] = ls[w - 2] + ls[b + 2]
      else
        if w < b then
          ls[w + 1], ls[w + 2], ls[w + 3], ls[w + 4] = ls[b + 1], ls[b + 2], ls[b + 3], ls[b + 4]
        end
        w = w + 4
      end
    end
    for k = #ls, w + 1, -1 do
      ls[k] = nil
    end
    local a, n = 0, 0
    for b = 0, #ls - 4, 4 do
      a = a + ls[b + 2]
      if ls[b + 1] == '' then n = n + 1 end
    end
    while n > 0 do
      local b = #ls - 4
      local e = ls[b + 3]
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
      a = a - ls[b + 2]
      ls[b + 4], ls[b + 3], ls[b + 2], ls[b + 1] = nil, nil, nil, nil
      n = n - 1
    end
    return ls, x
  end

  -- full_in is how long after t a token_bucket full in d µs by refill
  -- alone is full with its loans counted (running and ended): the latest
  -- of d and (E - t) + A(E)*P/L, one running sum by expiry.
  local function full_in(ls, d, t)
    local a, b, n = 0, 0, #ls
    while b < n do
      local e = ls[b + 3]
      repeat
        a = a + ls[b + 2]
        b = b + 4
      until b >= n or ls[b + 3] ~= e
      local c = (e - t) + a * pf / lf
      if c > d then d = c end
    end
    return d
  end

  -- spent_by is the later of e and every loan's expiry plus what its
  -- tokens A(E) are worth at the key's rate: when a gcra key's TAT (e)
  -- and loans are all past.
  local function spent_by(ls, e)
    local a, b, n = 0, 0, #ls
    while b < n do
      local x = ls[b + 3]
      repeat
        a = a + ls[b + 2]
        b = b + 4
      until b >= n or ls[b + 3] ~= x
      local c = x + math.ceil(a * pf / lf)
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
  return {roll = roll, set_ahead = set_ahead, fw_expiry = fw_expiry, read = read, write = write, find = find, lent_to = lent_to, settle = settle, tat_back = tat_back, held_of = held_of, end_loan = end_loan, retire = retire, take = take, trim = trim, full_in = full_in, spent_by = spent_by}
end
