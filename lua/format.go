package lua

import (
	"encoding/binary"
	"math"

	"github.com/sluicehq/sluice/lease"
	"github.com/sluicehq/sluice/lease/algo"
)

// The scripts' format of a leased key's state (leased.lua: head,
// pack_loan), in Go: each leased algorithm's packer, named by its row in
// store.go's table, packs its state (package algo's type) as its scripts
// do, for first touches (first.go); the parity tests compare what it packs
// of the Go definition's state with what the scripts write. Little-endian
// integers of 1, 2, 4 or 7 bytes as their values need (width codes 0-3),
// token_bucket's level a double, times of token_bucket and gcra loans as
// zigzag distances from the key's reference time, a fixed_window share's
// end as µs after the window start.

// widthCode is the width code of x ≥ 0: 0-3 for 1, 2, 4 and 7 bytes.
func widthCode(x int64) byte {
	switch {
	case x < 1<<8:
		return 0
	case x < 1<<16:
		return 1
	case x < 1<<32:
		return 2
	}
	return 3
}

var widthBytes = [4]int{1, 2, 4, 7}

// putInt appends x in the width of code c.
func putInt(b []byte, x int64, c byte) []byte {
	for i := range widthBytes[c] {
		b = append(b, byte(uint64(x)>>(8*i)))
	}
	return b
}

func put7(b []byte, x int64) []byte { return putInt(b, x, 3) }

func zigzag(d int64) int64 {
	if d >= 0 {
		return 2 * d
	}
	return -2*d - 1
}

// packLast appends a token_bucket or gcra header's last call and its
// grant (when the key tells calls apart).
func packLast(b []byte, call uint32, grant int64) []byte {
	w := widthCode(grant)
	b = binary.LittleEndian.AppendUint32(b, call)
	return putInt(b, grant, w)
}

// packTokenBucket packs a token_bucket state (nil: no state).
func packTokenBucket(s algo.LeasedState) []byte {
	st := s.(*algo.TokenBucketState)
	if st.Updated == 0 {
		return nil
	}
	b := make([]byte, 0, 64)
	h := byte(0)
	if st.Last.Call != 0 {
		h = 1 + 2*widthCode(st.Last.Grant)
	}
	b = append(b, h)
	b = binary.LittleEndian.AppendUint64(b, math.Float64bits(st.Tokens))
	b = put7(b, st.Updated)
	if st.Last.Call != 0 {
		b = packLast(b, st.Last.Call, st.Last.Grant)
	}
	return packRefillLoans(b, st.Loans, st.Updated)
}

// packGCRA packs a gcra state (nil: no state).
func packGCRA(s algo.LeasedState) []byte {
	st := s.(*algo.GCRAState)
	if st.TAT == 0 {
		return nil
	}
	b := make([]byte, 0, 64)
	h := byte(0)
	if st.Last.Call != 0 {
		h = 1 + 2*widthCode(st.Last.Grant)
	}
	b = append(b, h)
	b = put7(b, st.TAT)
	if st.Last.Call != 0 {
		b = packLast(b, st.Last.Call, st.Last.Grant)
	}
	return packRefillLoans(b, st.Loans, st.TAT)
}

// packRefillLoans appends token_bucket or gcra loans against ref.
func packRefillLoans(b []byte, ls []lease.Loan, ref int64) []byte {
	for _, l := range ls {
		cl := widthCode(l.Lent)
		d1 := zigzag(l.Expires - ref)
		c1 := widthCode(d1)
		switch {
		case l.Holder == "":
			b = append(b, cl+4*c1)
			b = putInt(b, l.Lent, cl)
			b = putInt(b, d1, c1)
		case l.LastSpend > 0:
			d2 := zigzag(ref - l.LastSpend)
			c2 := widthCode(d2)
			b = append(b, 192+cl+4*c1+16*c2)
			b = append(b, l.Holder...)
			b = putInt(b, l.Lent, cl)
			b = putInt(b, d1, c1)
			b = putInt(b, d2, c2)
		default:
			b = append(b, 64+cl+4*c1)
			b = append(b, l.Holder...)
			b = putInt(b, l.Lent, cl)
			b = putInt(b, d1, c1)
		}
	}
	return b
}

// packFixedWindow packs a fixed_window state (nil: no state).
func packFixedWindow(s algo.LeasedState) []byte {
	st := s.(*algo.FixedWindowState)
	if st.Start == 0 {
		return nil
	}
	return packWindow(st.Start, st.Count, 0, false, st.Loans)
}

// packSlidingWindow packs a sliding_window state (nil: no state).
func packSlidingWindow(s algo.LeasedState) []byte {
	st := s.(*algo.SlidingWindowState)
	if st.Start == 0 {
		return nil
	}
	return packWindow(st.Start, st.Cur, st.Prev, true, st.Loans)
}

// packWindow packs a fixed_window (sliding false: start, count) or
// sliding_window (start, cur, prev) state.
func packWindow(start, count, prev int64, sliding bool, ls []lease.Loan) []byte {
	b := make([]byte, 0, 48)
	w := widthCode(count)
	if sliding {
		w2 := widthCode(prev)
		b = append(b, w+4*w2)
		b = put7(b, start)
		b = putInt(b, count, w)
		b = putInt(b, prev, w2)
	} else {
		b = append(b, w)
		b = put7(b, start)
		b = putInt(b, count, w)
	}
	for _, l := range ls {
		cl := widthCode(l.Lent)
		if l.Share == 0 {
			b = append(b, 64+cl)
			b = append(b, l.Holder...)
			b = putInt(b, l.Lent, cl)
			continue
		}
		d := l.Expires - start
		cs, ce := widthCode(l.Share), widthCode(d)
		b = append(b, 192+cl+4*cs+16*ce)
		b = append(b, l.Holder...)
		b = putInt(b, l.Lent, cl)
		b = putInt(b, l.Share, cs)
		b = putInt(b, d, ce)
	}
	return b
}
