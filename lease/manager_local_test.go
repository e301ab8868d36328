package lease

import (
	"reflect"
	"testing"
	"time"
)

// samePolicy is the fast path's comparison: two policies that differ in
// any one field are not the same (a field added to Policy and not to
// samePolicy fails here).
func TestPolicySameEveryField(t *testing.T) {
	base := Policy{Algorithm: TokenBucket, Limit: 10, Period: time.Second, Burst: 20, MinInterval: time.Millisecond, OnFailure: FailOpen}
	if q := base; !samePolicy(&base, &q) {
		t.Fatal("a policy is not the same as its copy")
	}
	v := reflect.ValueOf(&base).Elem()
	for i := range v.NumField() {
		q := base
		f := reflect.ValueOf(&q).Elem().Field(i)
		switch f.Kind() {
		case reflect.Uint8:
			f.SetUint(f.Uint() + 1)
		case reflect.Int64:
			f.SetInt(f.Int() + 1)
		default:
			t.Fatalf("field %s: kind %s not covered by this test", v.Type().Field(i).Name, f.Kind())
		}
		if samePolicy(&base, &q) || samePolicy(&q, &base) {
			t.Errorf("policies differing in %s are the same", v.Type().Field(i).Name)
		}
	}
}

// Prefix.TakeLocal decides from the tokens on hand and nothing else: it
// refuses (changing nothing) whatever only Take can decide, and a key it
// was not told of by Prefix.Take.
func TestPrefixTakeLocal(t *testing.T) {
	m, fs, _ := testManager(t, nil)
	p := perSecond(100)
	px := m.Prefix("r:")
	if _, _, ok := px.TakeLocal("k", &p, 1); ok {
		t.Fatal("TakeLocal decided a key with no bucket")
	}
	// A bucket made by the Manager's Take is not in the Prefix's index
	// until a check of it goes through the Prefix.
	mustTake(t, m, "r:k", p, 1)
	if _, _, ok := px.TakeLocal("k", &p, 1); ok {
		t.Fatal("TakeLocal decided a key the Prefix was not told of")
	}
	d, err := px.Take("k", p, 1)
	if err != nil || !d.Allowed {
		t.Fatalf("Prefix.Take: %+v, %v", d, err)
	}
	calls := fs.calls[opLease].Load()
	held := m.buckets.load("r:k").tokens.Load()
	if held < 2 {
		t.Fatalf("%d tokens on hand after the first lease, want at least 2", held)
	}
	remaining, reset, ok := px.TakeLocal("k", &p, 1)
	if !ok {
		t.Fatal("TakeLocal refused a check with tokens on hand")
	}
	if got := m.buckets.load("r:k").tokens.Load(); got != held-1 {
		t.Fatalf("tokens on hand after TakeLocal of 1: %d, want %d", got, held-1)
	}
	// Its answer is the allowed Decision Take's fast path gives (the
	// clock is frozen: the same now).
	if want := m.buckets.load("r:k").decision(held-1, m.clk.nanos()); remaining != want.Remaining || reset != want.Reset {
		t.Fatalf("TakeLocal answered remaining %d, reset %v; Take's fast path: %d, %v", remaining, reset, want.Remaining, want.Reset)
	}
	other := perSecond(99)
	for _, c := range []struct {
		name string
		key  string
		p    *Policy
		hits int64
	}{
		{"a peek", "k", &p, 0},
		{"negative hits", "k", &p, -1},
		{"hits over MaxHits", "k", &p, MaxHits + 1},
		{"more hits than on hand", "k", &p, held},
		{"another policy", "k", &other, 1},
		{"another key", "j", &p, 1},
		{"the key with the prefix", "r:k", &p, 1},
	} {
		if _, _, ok := px.TakeLocal(c.key, c.p, c.hits); ok {
			t.Errorf("%s: decided", c.name)
		}
	}
	if got := m.buckets.load("r:k").tokens.Load(); got != held-1 {
		t.Fatalf("tokens on hand after refused TakeLocals: %d, want %d", got, held-1)
	}
	if got := fs.calls[opLease].Load(); got != calls {
		t.Fatalf("TakeLocal called the Store: %d lease calls, want %d", got, calls)
	}
	// Another Prefix of the same prefix shares the index; one of another
	// prefix does not see the key.
	if _, _, ok := m.Prefix("r:").TakeLocal("k", &p, 1); !ok {
		t.Fatal("a second Prefix of r: does not find k")
	}
	if _, _, ok := m.Prefix("s:").TakeLocal("k", &p, 1); ok {
		t.Fatal("the Prefix s: decided r:k")
	}
}

// Prefix.TakeLocal allocates nothing, and neither does Prefix.Take of a
// leased key once its buffer is pooled.
func TestPrefixTakeLocalAllocatesNothing(t *testing.T) {
	m, _, _ := testManager(t, nil)
	p := Policy{Algorithm: TokenBucket, Limit: MaxLimit, Period: time.Second}
	px := m.Prefix("rule:")
	if d, err := px.Take("k", p, 1); err != nil || !d.Allowed {
		t.Fatalf("Prefix.Take: %+v, %v", d, err)
	}
	if allocs := testing.AllocsPerRun(100, func() {
		if _, _, ok := px.TakeLocal("k", &p, 1); !ok {
			t.Fatal("TakeLocal refused a leased key")
		}
	}); allocs != 0 {
		t.Fatalf("%v allocations per TakeLocal, want 0", allocs)
	}
}
