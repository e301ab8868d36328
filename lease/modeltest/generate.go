package modeltest

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/sluicehq/sluice/lease"
)

// idle is the Managers' Config.Idle; horizon their Config.Horizon (the
// default).
const (
	idle    = 10 * time.Second
	horizon = 100 * time.Millisecond
	// touchMs is the resolution of a Manager's idle clock: Idle/100.
	touchMs = int64(idle / 100 / time.Millisecond)
)

// scenario is one seed's test: everything but the outcomes.
type scenario struct {
	seed       uint64
	holders    int
	safetyOnly bool
	keys       []lease.Policy // key i is "k<i>"
	ops        []op
	// ahead: the harness asks for shares ahead in the Managers' place
	// (Options.Ahead, see inject).
	ahead bool
	// maxHolders: the harness bounds each key's holders in the Managers'
	// lease calls (Options.MaxHolders, lease.Lessee.MaxHolders).
	maxHolders int
}

type opKind uint8

const (
	opTake       opKind = iota // Take (Acquire for concurrency) of items[0]
	opTakeMany                 // TakeMany of items
	opAdvance                  // move the clock by d
	opIdle                     // move the clock by d, then SweepIdle on every Manager
	opSweep                    // SweepIdle on Manager m now
	opReturnKeys               // ReturnKeys on Manager m, keeping the keys in keep
	opRelease                  // Release Manager m's oldest concurrency id of items[0].key
	opCrash                    // Manager m stops without a word; a new one replaces it
)

type item struct {
	key  int
	hits int64
}

// op is one step. Take and TakeMany with refund set refund every admitted
// hit right away, as a request that another rule denied does.
type op struct {
	kind   opKind
	m      int
	items  []item
	refund bool
	d      time.Duration
	keep   uint8 // bit i set: key i is kept
}

func (o op) String() string {
	switch o.kind {
	case opTake, opTakeMany:
		var b strings.Builder
		name := "take"
		if o.kind == opTakeMany {
			name = "takemany"
		}
		fmt.Fprintf(&b, "m%d %s", o.m, name)
		for i, it := range o.items {
			if i > 0 {
				b.WriteString(",")
			}
			fmt.Fprintf(&b, " k%d hits=%d", it.key, it.hits)
		}
		if o.refund {
			b.WriteString(", then refund what was admitted")
		}
		return b.String()
	case opAdvance:
		return fmt.Sprintf("advance %v", o.d)
	case opIdle:
		return fmt.Sprintf("advance %v, then idle sweep on every manager", o.d)
	case opSweep:
		return fmt.Sprintf("m%d idle sweep", o.m)
	case opReturnKeys:
		var kept []string
		for i := 0; i < 8; i++ {
			if o.keep&(1<<i) != 0 {
				kept = append(kept, fmt.Sprintf("k%d", i))
			}
		}
		return fmt.Sprintf("m%d ReturnKeys keeping [%s]", o.m, strings.Join(kept, " "))
	case opRelease:
		return fmt.Sprintf("m%d release its oldest id of k%d", o.m, o.items[0].key)
	case opCrash:
		return fmt.Sprintf("m%d crashes (returns nothing); a new Manager with a new holder id takes its place", o.m)
	}
	return "?"
}

// generate builds seed's scenario.
func generate(seed uint64, o Options) *scenario {
	r := rand.New(rand.NewPCG(seed, 0x5111ce))
	sc := &scenario{seed: seed, holders: o.Holders, safetyOnly: o.SafetyOnly, maxHolders: o.MaxHolders}
	// Drawn apart, so that a seed's ops are the same with Ahead or without.
	sc.ahead = o.Ahead && rand.New(rand.NewPCG(seed, 0xa4ead)).IntN(2) == 0
	switch most := MaxHolders(o.MaxHolders); {
	case sc.holders >= 1 && sc.holders <= most:
	case o.MaxHolders > 0:
		// Up to twice the bound: holders past it on every key.
		sc.holders = 1 + r.IntN(most)
	default:
		sc.holders = 1 + r.IntN(3)
	}
	algs := o.Algorithms
	if len(algs) == 0 {
		algs = lease.Algorithms() // an algorithm the model does not know fails in randPolicy
	}
	nkeys := 1 + r.IntN(3)
	for range nkeys {
		sc.keys = append(sc.keys, randPolicy(r, algs[r.IntN(len(algs))]))
	}
	for len(sc.ops) < o.Steps {
		sc.ops = append(sc.ops, sc.randOp(r))
	}
	return sc
}

func pick[T any](r *rand.Rand, xs ...T) T { return xs[r.IntN(len(xs))] }

func randPolicy(r *rand.Rand, a lease.Algorithm) lease.Policy {
	p := lease.Policy{Algorithm: a}
	switch a {
	case lease.TokenBucket, lease.GCRA:
		switch r.IntN(7) {
		case 6: // a big burst at a tiny rate
			p.Limit, p.Period, p.Burst = 1, 8760*time.Hour, 200000
			if p.Validate() != nil {
				// Refused at validation (a rule file would be): the
				// biggest refill time validation allows, about.
				p.Limit = 10000
			}
		case 0: // a burst below a minute's limit
			p.Limit, p.Period, p.Burst = 600, time.Minute, 100
		case 1:
			p.Limit, p.Period = pick[int64](r, 1, 2, 3, 10), time.Second
		case 2:
			p.Limit, p.Period, p.Burst = 1000, time.Hour, 50
		default:
			p.Limit = pick[int64](r, 1, 5, 10, 60, 100, 600, 1000)
			p.Period = pick(r, time.Second, 10*time.Second, time.Minute, time.Hour)
			p.Burst = pick(r, 0, p.Limit/6+1, 2*p.Limit, 3)
		}
		if p.Validate() != nil {
			p.Limit, p.Period, p.Burst = 10, time.Second, 0
		}
	case lease.FixedWindow, lease.SlidingWindow:
		p.Limit = pick[int64](r, 1, 3, 10, 100, 600)
		p.Period = pick(r, time.Second, 10*time.Second, time.Minute)
	case lease.SlidingLog:
		p.Limit = pick[int64](r, 1, 2, 5, 20)
		p.Period = pick(r, time.Second, 10*time.Second)
		p.MinInterval = pick(r, 0, 0, 100*time.Millisecond)
	case lease.Concurrency:
		p.Limit = pick[int64](r, 1, 2, 5)
		p.Period = pick(r, time.Second, 10*time.Second)
	default:
		panic("modeltest: no model of " + a.String() + ": give randPolicy its policies and the model (model.go) its semantics")
	}
	return p
}

// randHits draws a check's hits for a policy of capacity c: 0, 1, a few,
// many, about all, all, more than all.
func randHits(r *rand.Rand, p lease.Policy) int64 {
	c := p.Capacity()
	if p.Algorithm == lease.Concurrency {
		return pick[int64](r, 0, 1, 1, 1, 1)
	}
	switch n := r.IntN(100); {
	case n < 10:
		return 0
	case n < 45:
		return 1
	case n < 60:
		return min(c, 2+r.Int64N(4))
	case n < 78:
		return 1 + r.Int64N(c/4+1)
	case n < 90:
		return c/2 + r.Int64N(c/2+1)
	case n < 95:
		return c
	default:
		return c + 1 + r.Int64N(c+1)
	}
}

func (sc *scenario) randItem(r *rand.Rand) item {
	k := r.IntN(len(sc.keys))
	return item{key: k, hits: randHits(r, sc.keys[k])}
}

func (sc *scenario) randOp(r *rand.Rand) op {
	m := r.IntN(sc.holders)
	if sc.maxHolders > 0 && r.IntN(8) == 0 {
		// Churn past the bound: a holder leaves every key (and comes
		// back at its next check), or vanishes (a new one takes its
		// place).
		if r.IntN(3) == 0 {
			return op{kind: opCrash, m: m}
		}
		return op{kind: opReturnKeys, m: m}
	}
	switch n := r.IntN(100); {
	case n < 48:
		it := sc.randItem(r)
		if sc.keys[it.key].Algorithm == lease.Concurrency && r.IntN(3) == 0 {
			return op{kind: opRelease, m: m, items: []item{it}}
		}
		return op{kind: opTake, m: m, items: []item{it}, refund: r.IntN(8) == 0}
	case n < 62:
		o := op{kind: opTakeMany, m: m, refund: r.IntN(8) == 0}
		for range 2 + r.IntN(5) {
			it := sc.randItem(r)
			if sc.keys[it.key].Algorithm == lease.Concurrency {
				continue // TakeMany does not serve concurrency
			}
			o.items = append(o.items, it)
		}
		if len(o.items) == 0 {
			return op{kind: opAdvance, d: time.Millisecond}
		}
		return o
	case n < 86:
		var d time.Duration
		switch k := r.IntN(10); {
		case k < 5:
			d = time.Duration(1+r.IntN(50)) * time.Millisecond
		case k < 8:
			// Up to a period, at most a day: a run must stay far from
			// the year 2262, where Unix nanoseconds overflow.
			p := min(sc.keys[r.IntN(len(sc.keys))].Period, 24*time.Hour)
			d = time.Duration(1+r.Int64N(int64(p/time.Millisecond))) * time.Millisecond
		default:
			d = pick(r, 8*time.Second, time.Minute, time.Hour, 3*time.Second, 500*time.Millisecond)
		}
		return op{kind: opAdvance, d: d}
	case n < 91:
		return op{kind: opIdle, d: idle + time.Duration(r.IntN(3000))*time.Millisecond}
	case n < 94:
		return op{kind: opSweep, m: m}
	case n < 95:
		return op{kind: opCrash, m: m}
	default:
		return op{kind: opReturnKeys, m: m, keep: uint8(r.IntN(1 << len(sc.keys)))}
	}
}
