package node

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/sluicehq/sluice/lease"
)

// downStore is a Store that is always unavailable (a seam we own).
type downStore struct{}

func (downStore) Lease(context.Context, string, lease.Policy, int64, int64, lease.Lessee) (lease.Grant, error) {
	return lease.Grant{}, lease.ErrStoreUnavailable
}
func (downStore) Return(context.Context, string, lease.Policy, int64, string) error {
	return lease.ErrStoreUnavailable
}
func (downStore) Log(context.Context, string, lease.Policy, int64) (lease.Result, error) {
	return lease.Result{}, lease.ErrStoreUnavailable
}
func (downStore) Acquire(context.Context, string, lease.Policy, string, int64) (lease.Result, error) {
	return lease.Result{}, lease.ErrStoreUnavailable
}
func (downStore) Release(context.Context, string, lease.Policy, string) error {
	return lease.ErrStoreUnavailable
}

const failureRules = `
rules:
  - name: closed
    algorithm: token_bucket
    limit: 2
    period: 1h
    on_store_failure: closed
    key: header:X-Closed
  - name: open
    algorithm: token_bucket
    limit: 2
    period: 1h
    on_store_failure: open
  - name: local
    algorithm: token_bucket
    limit: 2
    period: 1h
    on_store_failure: local
`

func TestStoreDown(t *testing.T) {
	tn := newTestNodeStore(t, failureRules, downStore{}, testClock())
	r := tn.do("POST", "/v1/check", `{"rule":"closed","key":"a"}`)
	if r.status != 503 || r.hdr["Retry-After"] == "" || r.json(t)["allowed"] != false {
		t.Errorf("closed: %d %s %v", r.status, r.body, r.hdr)
	}
	if r := tn.do("GET", "/v1/auth", "", "X-Closed: k"); r.status != 503 || r.hdr["Retry-After"] == "" {
		t.Errorf("closed forward-auth: %d %v", r.status, r.hdr)
	}
	for i := range 3 {
		r := tn.do("POST", "/v1/check", `{"rule":"open","key":"a"}`)
		if m := r.json(t); r.status != 200 || m["degraded"] != true {
			t.Errorf("open %d: %d %s", i, r.status, r.body)
		}
	}
	// local keeps enforcing the limit from this node's memory.
	for i, want := range []int{200, 200, 429} {
		r := tn.do("POST", "/v1/check", `{"rule":"local","key":"a"}`)
		if m := r.json(t); r.status != want || m["degraded"] != true {
			t.Errorf("local %d: %d %s, want %d degraded", i, r.status, r.body, want)
		}
	}
	m := tn.do("GET", "/metrics", "").body
	for _, want := range []string{
		`sluice_checks_total{rule="closed",decision="unavailable"} 2`,
		`sluice_checks_total{rule="open",decision="degraded"} 3`,
		`sluice_checks_total{rule="local",decision="denied"} 1`,
	} {
		if !strings.Contains(m, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
}

func TestErrorStatus(t *testing.T) {
	cases := []struct {
		err    error
		status int
		field  string
	}{
		{fieldError("key", "required"), 400, "key"},
		{&lease.FieldError{Field: "hits", Msg: "too many"}, 400, "hits"},
		{fmt.Errorf("cannot take: %w", lease.ErrWrongAlgorithm), 400, "rule"},
		{ErrNotFound, 404, ""},
		{ErrMethodNotAllowed, 405, ""},
		{ErrBodyTooLarge, 413, ""},
		{fasthttp.ErrBodyTooLarge, 413, ""},
		{ErrHeaderTooLarge, 431, ""},
		{ErrNotReady, 503, ""},
		{fmt.Errorf("cannot release: %w", lease.ErrStoreUnavailable), 503, ""},
		{os.ErrDeadlineExceeded, 408, ""},
		{errors.New("boom"), 500, ""},
	}
	for _, c := range cases {
		status, msg, field := errorStatus(c.err)
		if status != c.status || field != c.field || msg == "" {
			t.Errorf("%v: %d %q %q, want %d field %q", c.err, status, msg, field, c.status, c.field)
		}
	}
}

// toggleStore is a MemoryStore that can be made unavailable (a seam we own).
type toggleStore struct {
	*lease.MemoryStore
	down atomic.Bool
}

func (s *toggleStore) Lease(ctx context.Context, key string, p lease.Policy, want, need int64, to lease.Lessee) (lease.Grant, error) {
	if s.down.Load() {
		return lease.Grant{}, lease.ErrStoreUnavailable
	}
	return s.MemoryStore.Lease(ctx, key, p, want, need, to)
}

// TestDegradedChargeIsNotRefunded: a request allowed by one rule in a
// failure mode (no Store tokens taken) and denied by another must not
// "refund" the first rule into its leased bucket — those tokens were never
// granted by the Store and would be admitted on top of the limit once the
// Store is back.
func TestDegradedChargeIsNotRefunded(t *testing.T) {
	clock := testClock()
	store := &toggleStore{MemoryStore: lease.NewMemoryStore(lease.MemoryStoreConfig{Now: clock.Now})}
	t.Cleanup(func() { store.Close() })
	tn := newTestNodeStore(t, `
rules:
  - name: a
    algorithm: token_bucket
    limit: 3
    period: 1h
    key: header:X-K
  - name: b
    algorithm: token_bucket
    limit: 1
    period: 1h
    key: header:X-B
`, store, clock)
	admitted := 0
	// The Store is up: rule a leases and spends a token.
	if r := tn.do("POST", "/v1/check", `{"rule":"a","key":"k"}`); r.status == 200 {
		admitted++
	}
	store.down.Store(true)
	// Store down: a allows from node memory (degraded); b allows once, then
	// denies, and a's charge of the denied request is undone.
	for i, want := range []int{200, 429} {
		if r := tn.do("GET", "/v1/auth", "", "X-K: k", "X-B: k"); r.status != want {
			t.Fatalf("request %d while the Store is down: %d %s, want %d", i, r.status, r.body, want)
		}
	}
	store.down.Store(false)
	clock.Advance(time.Minute) // past the breaker's cool-down; 1h period: no refill to speak of
	for range 10 {
		if r := tn.do("POST", "/v1/check", `{"rule":"a","key":"k"}`); r.status == 200 {
			admitted++
		}
	}
	// Only the Store's 3 tokens may be admitted through it (the degraded
	// admissions came from node memory while it was down).
	if admitted > 3 {
		t.Fatalf("rule a admitted %d through the Store, limit 3: a degraded decision was refunded into the leased bucket", admitted)
	}
}
