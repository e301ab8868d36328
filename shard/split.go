package shard

import (
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Plan announces how one hot key is served. A plan with holders splits the
// key: each holder leases from the key's Store bucket and serves checks for
// it itself; a plan without holders ends the split. Plans of a key are
// ordered by Epoch: a receiver keeps the plan with the highest epoch it has
// seen and ignores older ones, whatever order gossip delivers them in.
type Plan struct {
	Key string
	// Holders are the members serving the key, the owner first. Empty
	// means the split has ended. Callers must not modify it.
	Holders []string
	// Epoch orders the plans of a key. The Splitter derives it from the
	// wall clock (Unix nanoseconds, bumped to stay strictly increasing),
	// so that the plans of an owner that restarted, or of a new owner after
	// a membership change, supersede the old ones.
	Epoch uint64
}

// Split reports whether the plan splits its key (rather than ending a
// split).
func (p Plan) Split() bool { return len(p.Holders) > 0 }

// Has reports whether member is one of the plan's holders.
func (p Plan) Has(member string) bool { return slices.Contains(p.Holders, member) }

// Load is what a node's owner side knows about one key when it decides
// splits: its rate as observed by this node and its rule's hot-key
// settings.
type Load struct {
	Key string
	// Rate is the checks per second this node served for the key
	// ([Entry].Rate). While the key is split, the node serves only its
	// share, so the Splitter multiplies Rate by the number of holders to
	// estimate the key's total rate (gateways spread checks evenly over
	// nodes, and non-holders forward to a random holder).
	Rate float64
	// Threshold is the rule's hot.threshold in checks per second; ≤ 0
	// means the key is never split (and a split of it ends).
	Threshold float64
	// Split is the rule's hot.split: the number of holders, 0 meaning
	// every member.
	Split int
}

// SplitConfig configures a [Splitter].
type SplitConfig struct {
	// Cooling is how long a split key's rate must stay below half its
	// threshold before the split ends. Zero means 10s.
	Cooling time.Duration
}

// DefaultSplitConfig returns the configuration used by nodes: a 10 s
// cooling period, long enough that a key whose traffic comes in bursts
// of a few seconds stays split, short enough that holders return their
// tokens soon after a key goes quiet.
func DefaultSplitConfig() SplitConfig { return SplitConfig{Cooling: 10 * time.Second} }

// Splitter is the owner side of hot-key splitting: it decides, from the
// rates of the keys a node owns, which keys to split across which holders
// and when to end a split.
//
//   - A key splits when its rate exceeds its threshold (and the ring has at
//     least two members to hold it). Its holders are ring.OwnerN(key, n):
//     the owner first, then the members that would own the key next.
//   - A split ends when the key's estimated total rate has stayed below
//     half the threshold for the cooling period. Between half the
//     threshold and the threshold nothing changes: that band, with the
//     cooling period, is what keeps a key near its threshold from
//     flapping.
//   - Every plan has a new epoch, strictly increasing.
//
// Splitter is safe for concurrent use; its methods take now as an argument
// and never read the clock.
type Splitter struct {
	self    string
	cooling time.Duration

	mu struct {
		sync.Mutex
		keys  map[string]*splitState
		epoch uint64 // the last epoch issued
		gen   uint64 // Decide calls, to find keys missing from loads
	}
}

type splitState struct {
	plan  Plan
	split int       // the Load.Split the holders were computed for
	below time.Time // when the rate fell below half the threshold; zero if it is not below
	seen  uint64    // the last Decide generation that had a load for the key
}

// NewSplitter returns the splitter of the member named self: it starts
// splits only for keys that self owns on the ring passed to Decide, and
// ends those it no longer owns. self == "" skips the ownership checks
// (for a single node, or tests).
func NewSplitter(self string, cfg SplitConfig) (*Splitter, error) {
	if cfg.Cooling < 0 {
		return nil, fmt.Errorf("splitter: cooling: must be ≥ 0, got %s", cfg.Cooling)
	}
	if cfg.Cooling == 0 {
		cfg.Cooling = 10 * time.Second
	}
	s := &Splitter{self: self, cooling: cfg.Cooling}
	s.mu.keys = make(map[string]*splitState)
	return s, nil
}

// nextEpoch returns an epoch above every one issued, at least now in Unix
// nanoseconds.
func (s *Splitter) nextEpoch(now time.Time) uint64 {
	e := s.mu.epoch + 1
	if ns := now.UnixNano(); ns > 0 && uint64(ns) > e {
		e = uint64(ns)
	}
	s.mu.epoch = e
	return e
}

func (s *Splitter) owns(ring *Ring, key string) bool {
	return s.self == "" || ring.Owner(key) == s.self
}

// holders returns the holders of key for a rule's split count.
func holders(ring *Ring, key string, split int) []string {
	n := split
	if n <= 0 || n > ring.Len() {
		n = ring.Len()
	}
	return ring.OwnerN(key, n, make([]string, 0, n))
}

// Decide takes the current loads of the keys this node serves (typically
// one Load per [TopK] entry, after a Tick) and returns the plans to
// announce: start holds new splits and changed holder sets, end holds ends
// of splits. A split key missing from loads counts as idle (rate 0). Keys
// appear at most once in loads; later duplicates are ignored.
func (s *Splitter) Decide(now time.Time, loads []Load, ring *Ring) (start, end []Plan) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.mu.gen++
	gen := s.mu.gen
	for _, l := range loads {
		st := s.mu.keys[l.Key]
		if st == nil {
			if l.Key == "" || l.Threshold <= 0 || !(l.Rate > l.Threshold) || !s.owns(ring, l.Key) {
				continue
			}
			h := holders(ring, l.Key, l.Split)
			if len(h) < 2 {
				continue // nothing to spread over
			}
			st = &splitState{plan: Plan{Key: l.Key, Holders: h, Epoch: s.nextEpoch(now)}, split: l.Split, seen: gen}
			s.mu.keys[l.Key] = st
			start = append(start, st.plan)
			continue
		}
		if st.seen == gen {
			continue
		}
		st.seen = gen
		if l.Threshold <= 0 || !s.owns(ring, l.Key) {
			end = append(end, s.endLocked(now, st))
			continue
		}
		if s.cool(now, st, l.Rate*float64(len(st.plan.Holders)) < l.Threshold/2) {
			end = append(end, s.endLocked(now, st))
			continue
		}
		if l.Split != st.split {
			st.split = l.Split
			if p, ok := s.reholdLocked(now, ring, st); ok {
				start = append(start, p)
			}
		}
	}
	for _, st := range s.sortedLocked() {
		if st.seen != gen && s.cool(now, st, true) {
			end = append(end, s.endLocked(now, st))
		}
	}
	return start, end
}

// cool updates st's cooling state with whether its rate is below half the
// threshold now, and reports whether the split has cooled long enough to
// end.
func (s *Splitter) cool(now time.Time, st *splitState, below bool) bool {
	if !below {
		st.below = time.Time{}
		return false
	}
	if st.below.IsZero() {
		st.below = now
	}
	return now.Sub(st.below) >= s.cooling
}

func (s *Splitter) endLocked(now time.Time, st *splitState) Plan {
	delete(s.mu.keys, st.plan.Key)
	return Plan{Key: st.plan.Key, Epoch: s.nextEpoch(now)}
}

// reholdLocked recomputes st's holders on ring and reports the new plan if
// they changed.
func (s *Splitter) reholdLocked(now time.Time, ring *Ring, st *splitState) (Plan, bool) {
	h := holders(ring, st.plan.Key, st.split)
	if slices.Equal(h, st.plan.Holders) {
		return Plan{}, false
	}
	st.plan = Plan{Key: st.plan.Key, Holders: h, Epoch: s.nextEpoch(now)}
	return st.plan, true
}

// sortedLocked returns the split states ordered by key, so that the plans
// a call returns come in a deterministic order.
func (s *Splitter) sortedLocked() []*splitState {
	sts := slices.Collect(maps.Values(s.mu.keys))
	slices.SortFunc(sts, func(a, b *splitState) int {
		switch {
		case a.plan.Key < b.plan.Key:
			return -1
		case a.plan.Key > b.plan.Key:
			return 1
		}
		return 0
	})
	return sts
}

// Rehold recomputes the holders of every split on a new ring, after a
// membership change: changed holds a plan with a new epoch for each split
// whose holders changed; end holds an end for each split whose key this
// node no longer owns (its new owner decides afresh, see [Splitter.Adopt]),
// or that the ring can no longer spread over two members.
func (s *Splitter) Rehold(now time.Time, ring *Ring) (changed, end []Plan) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, st := range s.sortedLocked() {
		if !s.owns(ring, st.plan.Key) || ring.Len() < 2 {
			end = append(end, s.endLocked(now, st))
			continue
		}
		if p, ok := s.reholdLocked(now, ring, st); ok {
			changed = append(changed, p)
		}
	}
	return changed, end
}

// Adopt takes over the splits of keys that this node now owns but did not
// start, typically after the member that started them left: pass the
// active plans of the node's [Table] after a membership change. Without
// it, a split whose owner died would never end. Each adopted split gets
// holders recomputed on ring, the new owner first, and a new plan with a
// new epoch (returned in changed); its cooling starts afresh. Plans that
// end splits, of keys this node does not own, or of keys it already
// tracks are skipped; end holds an end for an adopted split that ring
// cannot spread over two members. Tables accept the new plans as long as
// this node's clock is not behind the old owner's by more than the age of
// its plans (epochs are clock-derived). Until the next Decide brings the
// rule's split count, an adopted split keeps its number of holders (or
// every member, if it had at least as many holders as ring has members).
func (s *Splitter) Adopt(now time.Time, plans []Plan, ring *Ring) (changed, end []Plan) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, p := range plans {
		if !p.Split() || s.mu.keys[p.Key] != nil || p.Key == "" || !s.owns(ring, p.Key) {
			continue
		}
		split := len(p.Holders)
		if split >= ring.Len() {
			split = 0
		}
		h := holders(ring, p.Key, split)
		if len(h) < 2 {
			// One member left: the split cannot go on; end it so that
			// the tables forget it.
			end = append(end, Plan{Key: p.Key, Epoch: s.nextEpoch(now)})
			continue
		}
		st := &splitState{plan: Plan{Key: p.Key, Holders: h, Epoch: s.nextEpoch(now)}, split: split, seen: s.mu.gen}
		s.mu.keys[p.Key] = st
		changed = append(changed, st.plan)
	}
	return changed, end
}

// Plans appends the current splits to dst, ordered by key.
func (s *Splitter) Plans(dst []Plan) []Plan {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, st := range s.sortedLocked() {
		dst = append(dst, st.plan)
	}
	return dst
}

// Table is the receiver side of hot-key splitting: the splits a node knows
// of, fed with the plans that owners announce. Lookup is lock-free and
// allocation-free (it reads an immutable snapshot that Apply replaces), so
// the node can call it on every check; Apply copies the snapshot, which is
// cheap because hot keys are few.
//
// Table is safe for concurrent use.
type Table struct {
	snap atomic.Pointer[map[string]Plan] // active splits only; never modified once stored

	mu struct {
		sync.Mutex
		epochs map[string]uint64 // the highest epoch applied per key, ended splits included
	}
}

// NewTable returns an empty table.
func NewTable() *Table {
	t := &Table{}
	empty := map[string]Plan{}
	t.snap.Store(&empty)
	t.mu.epochs = make(map[string]uint64)
	return t
}

// Apply records p if its epoch is higher than any applied for its key, and
// reports whether it did; older or repeated plans are ignored. A plan
// without holders ends the key's split. The table keeps its own copy of
// p.Holders. A plan with an empty key is ignored.
func (t *Table) Apply(p Plan) bool {
	if p.Key == "" {
		return false
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if e, ok := t.mu.epochs[p.Key]; ok && p.Epoch <= e {
		return false
	}
	t.mu.epochs[p.Key] = p.Epoch
	old := *t.snap.Load()
	_, had := old[p.Key]
	if !p.Split() && !had {
		return true
	}
	next := make(map[string]Plan, len(old)+1)
	maps.Copy(next, old)
	if p.Split() {
		p.Holders = slices.Clone(p.Holders)
		next[p.Key] = p
	} else {
		delete(next, p.Key)
	}
	t.snap.Store(&next)
	return true
}

// Lookup returns the split of key, if it is split.
func (t *Table) Lookup(key string) (Plan, bool) {
	m := *t.snap.Load()
	if len(m) == 0 {
		return Plan{}, false
	}
	p, ok := m[key]
	return p, ok
}

// Plans appends the active splits to dst, ordered by key.
func (t *Table) Plans(dst []Plan) []Plan {
	m := *t.snap.Load()
	start := len(dst)
	for _, p := range m {
		dst = append(dst, p)
	}
	slices.SortFunc(dst[start:], func(a, b Plan) int {
		switch {
		case a.Key < b.Key:
			return -1
		case a.Key > b.Key:
			return 1
		}
		return 0
	})
	return dst
}

// Len is the number of active splits.
func (t *Table) Len() int { return len(*t.snap.Load()) }

// Forget drops what the table remembers of ended splits whose last epoch
// is older than before (epochs read as Unix nanoseconds), so that the
// memory of ended splits stays bounded; a stale start of such a split that
// arrives later would be applied, so before should be well in the past (a
// minute, say, for gossip that converges in seconds). Active splits are
// kept.
func (t *Table) Forget(before time.Time) {
	cut := before.UnixNano()
	if cut <= 0 {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	active := *t.snap.Load()
	for k, e := range t.mu.epochs {
		if _, ok := active[k]; !ok && e < uint64(cut) {
			delete(t.mu.epochs, k)
		}
	}
}
