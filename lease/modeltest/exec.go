package modeltest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/lease"
)

// failure is the first violation of a run.
type failure struct {
	step int
	msg  string
}

func (f *failure) String() string { return fmt.Sprintf("op %d: %s", f.step+1, f.msg) }

type result struct {
	fail   *failure
	steps  int
	checks int
	// crowded: the crowded calls (Options.MaxHolders)
	crowded int
	trace   []string
}

// newRunID makes the keys of one exec unique, so that execs can share a
// Redis server.
func newRunID() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// dayNs is the alignment of every run's start: every window period divides it.
const dayNs = int64(24 * time.Hour)

// startOffset is where in its day a run starts (not on a second boundary,
// so that windows and rounding are not trivially aligned).
const startOffset = 12*time.Hour + 34*time.Minute + 56*time.Second + 789*time.Millisecond

// exec runs ops of sc on a fresh Store and fresh Managers and checks every
// step; with trace it describes every op and its outcome.
func (h Harness) exec(t testing.TB, sc *scenario, ops []op, trace bool) result {
	t.Helper()
	store := h.NewStore(t)
	// The same start in every run: the next day boundary but one, plus
	// startOffset. (A fake clock should also start every Store at the
	// same instant: a Store's float arithmetic may depend on it.)
	now := h.Now().UnixNano()
	start := (now/dayNs+2)*dayNs + int64(startOffset)
	h.Advance(time.Duration(start - now))
	prefix := fmt.Sprintf("mt:%s:%d:", newRunID(), sc.seed)
	// Every Manager, crashed ones included, is a holder of the model: a
	// slot. Manager i is slot i until it crashes.
	slots := sc.holders
	for _, o := range ops {
		if o.kind == opCrash {
			slots++
		}
	}
	md := newModel(sc, prefix, slots)
	md.safetyOnly = sc.safetyOnly
	md.tracing = trace
	_, md.bakesKnown = store.(BakingStore)
	md.setNow(h.Now())
	r := &run{h: h, md: md, store: store, slot: make([]int, sc.holders), next: sc.holders}
	for i := range sc.holders {
		r.ms = append(r.ms, r.newManager(i, i))
		r.slot[i] = i
	}
	defer func() {
		for _, m := range append(r.ms, r.crashed...) {
			_ = m.Close()
		}
	}()
	res := result{}
	for step, o := range ops {
		md.beginOp()
		line, err := r.apply(o)
		for _, m := range r.ms {
			m.Settle()
		}
		res.steps++
		if trace {
			res.trace = append(res.trace, line)
			for _, c := range md.takeNotes() {
				res.trace = append(res.trace, "  store: "+c)
			}
		}
		if err == "" {
			err = md.takeViolation()
		}
		if err != "" {
			res.fail = &failure{step: step, msg: err}
			res.checks, res.crowded = md.checks, md.crowdedCalls
			return res
		}
	}
	res.checks, res.crowded = md.checks, md.crowdedCalls
	return res
}

// run is one exec's Managers.
type run struct {
	h       Harness
	md      *model
	store   lease.Store
	ms      []*lease.Manager // the live Manager of each index
	slot    []int            // the model's holder slot of each index
	crashed []*lease.Manager // abandoned, closed at the end
	next    int              // the next free slot
}

// newManager starts Manager i, whose Store calls the model sees as slot's.
func (r *run) newManager(i, slot int) *lease.Manager {
	cfg := lease.DefaultConfig()
	cfg.Now = r.h.Now
	cfg.SweepInterval = -1
	cfg.Idle = idle
	cfg.BatchWorkers = 1
	// A loaded machine must not make the Store look failed.
	cfg.StoreTimeout = time.Minute
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	cfg.Holder = fmt.Sprintf("m%d.%d", i, slot)
	if r.h.Config != nil {
		r.h.Config(&cfg)
	}
	r.md.setHorizon(cfg.Horizon)
	return lease.NewManager(&recorder{Store: r.store, m: slot, md: r.md, now: r.h.Now, calls: make(map[string]uint64)}, cfg)
}

// apply runs one op and checks its outcome; it returns the op's trace line
// and the first violation ("" if none).
func (r *run) apply(o op) (line, violation string) {
	h, md := r.h, r.md
	if o.kind == opCrash {
		// The Manager stops without returning anything (a crashed
		// node); a new one with a new holder id takes its place.
		r.crashed = append(r.crashed, r.ms[o.m])
		r.slot[o.m] = r.next
		r.ms[o.m] = r.newManager(o.m, r.next)
		r.next++
		return fmt.Sprintf("%s (called m%d in the violations below)", o, r.next-1), ""
	}
	line = o.String()
	// The model knows Managers by slot, the ops by index.
	ms := make([]*lease.Manager, r.next)
	for i, m := range r.ms {
		ms[r.slot[i]] = m
	}
	o.m = r.slot[o.m]
	switch o.kind {
	case opAdvance:
		h.Advance(o.d)
		md.setNow(h.Now())
	case opIdle:
		h.Advance(o.d)
		md.setNow(h.Now())
		for i, m := range ms {
			if m != nil {
				m.SweepIdle(h.Now())
				m.Settle()
				md.swept(i, m.Holds)
			}
		}
	case opSweep:
		ms[o.m].SweepIdle(h.Now())
		md.swept(o.m, ms[o.m].Holds)
	case opReturnKeys:
		err := ms[o.m].ReturnKeys(func(key string) bool {
			k, ok := md.index(key)
			return ok && o.keep&(1<<k) != 0
		})
		md.returnedKeys(o.m, o.keep)
		if err != nil {
			return line, fmt.Sprintf("ReturnKeys: %v", err)
		}
	case opRelease:
		it := o.items[0]
		id := md.oldestID(o.m, it.key)
		if id == "" {
			return line + " → (none held)", ""
		}
		err := ms[o.m].Release(md.keyName(it.key), md.policy(it.key), id)
		md.released(it.key, id)
		// The model keeps the ids it took, not their TTLs: one may have
		// expired and been reaped, and so hold no slot any more.
		if err != nil && !errors.Is(err, lease.ErrNoSlot) {
			return line, fmt.Sprintf("Release: %v", err)
		}
	case opTake:
		it := o.items[0]
		p := md.policy(it.key)
		var (
			d   lease.Decision
			id  string
			err error
		)
		if p.Algorithm == lease.Concurrency {
			d, id, err = ms[o.m].Acquire(md.keyName(it.key), p, it.hits)
		} else {
			d, err = ms[o.m].Take(md.keyName(it.key), p, it.hits)
		}
		line += " → " + outcome(d, err)
		if err != nil {
			return line, fmt.Sprintf("Take(k%d, hits %d): unexpected error %v", it.key, it.hits, err)
		}
		v := md.decided(o.m, it, d, id)
		if v == "" {
			v = md.judge(o.m, it, d)
		}
		if o.refund && d.Allowed && it.hits > 0 && p.Algorithm.Leased() {
			// After the prefetch the check may have started: a refund
			// racing with it may be refused (documented), and the
			// model could not tell.
			ms[o.m].Settle()
			ms[o.m].Refund(md.keyName(it.key), p, it.hits)
			md.refunded(o.m, it)
		}
		return line, v
	case opTakeMany:
		cs := make([]lease.Check, len(o.items))
		for i, it := range o.items {
			cs[i] = lease.Check{Key: md.keyName(it.key), Policy: md.policy(it.key), Hits: it.hits}
		}
		ms[o.m].TakeMany(cs)
		line += " →"
		for i, c := range cs {
			if i > 0 {
				line += ","
			}
			line += " " + outcome(c.Decision, c.Err)
			if c.Err != nil {
				return line, fmt.Sprintf("TakeMany item %d (k%d, hits %d): unexpected error %v", i, o.items[i].key, o.items[i].hits, c.Err)
			}
		}
		// Admissions first (they happened at one instant), then the
		// denials are judged against the state after the whole batch
		// (never stricter than the state each was decided in).
		for i, c := range cs {
			if v := md.decided(o.m, o.items[i], c.Decision, ""); v != "" {
				violation = v
				break
			}
		}
		// Checks of a key that is in the batch more than once are not
		// decided in order (TakeMany's doc): only the safety side holds
		// for them.
		seen := make(map[int]int)
		for _, it := range o.items {
			seen[it.key]++
		}
		for i, c := range cs {
			if violation != "" {
				break
			}
			if seen[o.items[i].key] == 1 {
				violation = md.judge(o.m, o.items[i], c.Decision)
			}
		}
		if o.refund {
			ms[o.m].Settle()
			for i, c := range cs {
				if c.Decision.Allowed && c.Hits > 0 && c.Policy.Algorithm.Leased() {
					ms[o.m].Refund(c.Key, c.Policy, c.Hits)
					md.refunded(o.m, o.items[i])
				}
			}
		}
		return line, violation
	}
	return line, ""
}

func outcome(d lease.Decision, err error) string {
	switch {
	case err != nil:
		return "error " + err.Error()
	case d.Allowed:
		return fmt.Sprintf("allowed (remaining %d)", d.Remaining)
	case d.Unavailable:
		return "unavailable"
	default:
		return fmt.Sprintf("denied (retry %v, remaining %d)", d.RetryAfter, d.Remaining)
	}
}

// recorder is one Manager's view of the shared Store: it tells the model
// what the Store lent to that Manager and what came back.
//
// With scenario.ahead it also asks for shares ahead in the Manager's place
// (see inject) in fixed_window lease calls, and hides them from the
// Manager.
type recorder struct {
	lease.Store
	m   int
	md  *model
	now func() time.Time

	mu    sync.Mutex
	calls map[string]uint64 // the lease calls of each key so far (scenario.ahead)
}

func (r *recorder) Lease(ctx context.Context, key string, p lease.Policy, want, need int64, to lease.Lessee) (lease.Grant, error) {
	asked, injected := to.AheadWindows > 0, false
	if k, ok := r.md.index(key); ok && r.md.sc.ahead && to.ID != "" && p.Algorithm == lease.FixedWindow {
		r.mu.Lock()
		n := r.calls[key]
		r.calls[key]++
		r.mu.Unlock()
		var w, tokens int64
		if w, tokens, injected = r.md.sc.inject(r.m, k, n, asked); injected {
			to.AheadWindows, to.AheadTokens = w, tokens
		}
	}
	if r.md.sc.maxHolders > 0 && to.ID != "" {
		to.MaxHolders = r.md.sc.maxHolders // as a node sets it for its lease protocol's holders
	}
	g, err := r.Store.Lease(ctx, key, p, want, need, to)
	shared := ""
	if ss, ok := r.Store.(SharedStore); ok && err == nil && g.Granted == 0 && want > 0 && ss.ShareWait(key, to.ID) {
		shared = " (a wait for its share)"
	}
	ahead := ""
	if to.AheadWindows > 0 || g.AheadWindows > 0 {
		by := ""
		if injected {
			by = " by the harness"
		}
		ahead = fmt.Sprintf(", %d ahead in %d windows asked%s: lent %d ahead in %d", to.AheadTokens, to.AheadWindows, by, g.AheadTokens, g.AheadWindows)
	}
	crowded := ""
	if g.Crowded {
		crowded = fmt.Sprintf(" (crowded out: %d holders at most)", to.MaxHolders)
	}
	room := int64(-1)
	if cs, ok := r.Store.(CheckingStore); ok {
		room = cs.Room(p, to.Held)
	}
	if g.Checked {
		crowded = fmt.Sprintf(" (checked: %d more it may hold)", room)
	}
	r.md.note("m%d Lease(%s, want %d, need %d, held %d, spent before %d, idle %v) = granted %d, remaining %d, wait %v, reset %v, lent %d, err %v%s%s%s",
		r.m, r.md.short(key), want, need, to.Held, to.SpentBefore, to.Idle, g.Granted, g.Remaining, g.Wait, g.Reset, g.Lent, err, ahead, shared, crowded)
	if err == nil && (want > 0 || to.ID != "") {
		l := loan{lent: -1, direct: need > 0 && need == want}
		if to.ID != "" {
			l = loan{ttl: to.TTL, lent: g.Lent, held: to.Held, spentBefore: to.SpentBefore, idle: to.Idle, need: need,
				aheadWindows: to.AheadWindows, aheadTokens: to.AheadTokens, aheadKnown: !injected, maxHolders: to.MaxHolders,
				room: room}
		}
		r.md.leased(r.m, key, g, r.now(), l)
	}
	if shared != "" {
		r.md.shareWait(r.m, key, g, r.now())
	}
	r.bakes(key)
	if injected {
		// Hidden: to the Manager, the Store lent none ahead (all its
		// shares may take, when others' fill the limit).
		g.AheadTokens, g.AheadWindows = 0, 0
	}
	return g, err
}

// bakes tells the model of the bakes of the call on key just made, if
// the Store reports them (BakingStore).
func (r *recorder) bakes(key string) {
	bs, ok := r.Store.(BakingStore)
	if !ok {
		return
	}
	for _, b := range bs.Baked(key) {
		r.md.note("  (m%d's call baked the ended loan of %s, %d tokens lent then)", r.m, r.md.at(b.End.UnixNano()), b.Lent)
		r.md.baked(key, b.End, b.Lent, r.now())
	}
}

func (r *recorder) Return(ctx context.Context, key string, p lease.Policy, tokens int64, holder string) error {
	err := r.Store.Return(ctx, key, p, tokens, holder)
	r.md.note("m%d Return(%s, %d) err %v", r.m, r.md.short(key), tokens, err)
	if err == nil {
		r.md.returned(r.m, key, tokens, r.now())
	}
	r.bakes(key)
	return err
}

// Refund passes a Manager's refund (lease.Config.Direct) to the Store,
// when it takes them (lease.MemoryStore.Refund); the model counts the
// refund itself from the op (it is the Manager's Refund).
func (r *recorder) Refund(ctx context.Context, key string, p lease.Policy, hits int64) error {
	rf, ok := r.Store.(interface {
		Refund(ctx context.Context, key string, p lease.Policy, hits int64) error
	})
	if !ok {
		return nil
	}
	err := rf.Refund(ctx, key, p, hits)
	r.md.note("m%d Refund(%s, %d) err %v", r.m, r.md.short(key), hits, err)
	r.bakes(key)
	return err
}
