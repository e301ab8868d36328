package lease

import (
	"reflect"
	"testing"
	"time"
	"unsafe"
)

// Policy.same is the fast path's comparison: two policies that differ in
// any one field are not the same (a field added to Policy and not to same
// fails here).
func TestPolicySameEveryField(t *testing.T) {
	base := Policy{Algorithm: TokenBucket, Limit: 10, Period: time.Second, Burst: 20, MinInterval: time.Millisecond, OnFailure: FailOpen}
	if q := base; !base.same(&q) {
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
		if base.same(&q) || q.same(&base) {
			t.Errorf("policies differing in %s are the same", v.Type().Field(i).Name)
		}
	}
}

// TakeLocal decides from the tokens on hand and nothing else: it refuses
// (changing nothing) whatever only Take can decide.
func TestTakeLocal(t *testing.T) {
	m, fs, _ := testManager(t, nil)
	p := perSecond(100)
	if _, _, ok := m.TakeLocal("k", &p, 1); ok {
		t.Fatal("TakeLocal decided a key with no bucket")
	}
	d := mustTake(t, m, "k", p, 1)
	if !d.Allowed {
		t.Fatalf("first Take: %+v", d)
	}
	calls := fs.calls[opLease].Load()
	held := m.buckets.load("k").tokens.Load()
	if held < 2 {
		t.Fatalf("%d tokens on hand after the first lease, want at least 2", held)
	}
	remaining, reset, ok := m.TakeLocal("k", &p, 1)
	if !ok {
		t.Fatal("TakeLocal refused a check with tokens on hand")
	}
	if got := m.buckets.load("k").tokens.Load(); got != held-1 {
		t.Fatalf("tokens on hand after TakeLocal of 1: %d, want %d", got, held-1)
	}
	// Its answer is the allowed Decision Take's fast path gives (the
	// clock is frozen: the same now).
	if want := m.buckets.load("k").decision(held-1, m.nanos()); remaining != want.Remaining || reset != want.Reset {
		t.Fatalf("TakeLocal answered remaining %d, reset %v; Take's fast path: %d, %v", remaining, reset, want.Remaining, want.Reset)
	}
	other := perSecond(99)
	for _, c := range []struct {
		name string
		p    *Policy
		hits int64
	}{
		{"a peek", &p, 0},
		{"negative hits", &p, -1},
		{"hits over MaxHits", &p, MaxHits + 1},
		{"more hits than on hand", &p, held},
		{"another policy", &other, 1},
	} {
		if _, _, ok := m.TakeLocal("k", c.p, c.hits); ok {
			t.Errorf("%s: decided", c.name)
		}
	}
	if got := m.buckets.load("k").tokens.Load(); got != held-1 {
		t.Fatalf("tokens on hand after refused TakeLocals: %d, want %d", got, held-1)
	}
	if got := fs.calls[opLease].Load(); got != calls {
		t.Fatalf("TakeLocal called the Store: %d lease calls, want %d", got, calls)
	}
}

// TakeLocal allocates nothing, and neither does a caller that passes it
// a view of a stack buffer (the key does not escape).
func TestTakeLocalAllocatesNothing(t *testing.T) {
	m, _, _ := testManager(t, nil)
	p := Policy{Algorithm: TokenBucket, Limit: MaxLimit, Period: time.Second}
	mustTake(t, m, "rule:k", p, 1)
	prefix, key := "rule:", "k"
	allocs := testing.AllocsPerRun(100, func() {
		var buf [64]byte
		n := copy(buf[:], prefix)
		n += copy(buf[n:], key)
		if _, _, ok := m.TakeLocal(unsafe.String(&buf[0], n), &p, 1); !ok {
			t.Fatal("TakeLocal refused a leased key")
		}
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per TakeLocal, want 0", allocs)
	}
}
