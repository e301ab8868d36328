package node

import (
	"context"
	"encoding/json"
	"fmt"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/lease"
	"github.com/sluicehq/sluice/node/api"
)

// heldStore holds the first n Lease calls until the test opens the gate,
// and records how many were in flight together: a seam we own, over a
// real MemoryStore.
type heldStore struct {
	lease.Store
	n        int64
	inflight atomic.Int64
	most     atomic.Int64
	calls    atomic.Int64
	gate     chan struct{}
}

func (g *heldStore) Lease(ctx context.Context, key string, p lease.Policy, want, need int64, to lease.Lessee) (lease.Grant, error) {
	in := g.inflight.Add(1)
	defer g.inflight.Add(-1)
	for {
		most := g.most.Load()
		if in <= most || g.most.CompareAndSwap(most, in) {
			break
		}
	}
	if g.calls.Add(1) <= g.n {
		select {
		case <-g.gate:
		case <-ctx.Done():
			return lease.Grant{}, ctx.Err()
		}
	}
	return g.Store.Lease(ctx, key, p, want, need, to)
}

// waitInflight waits (bounded: 30s) until gs has gs.n calls in flight
// together, then opens the gate; it reports whether they got there.
func (g *heldStore) waitInflight() bool {
	defer close(g.gate)
	for deadline := time.Now().Add(30 * time.Second); g.inflight.Load() < g.n; {
		if time.Now().After(deadline) {
			return false
		}
		runtime.Gosched()
	}
	return true
}

func newHeldStore(t *testing.T, n int64) *heldStore {
	store := lease.NewMemoryStore(lease.MemoryStoreConfig{SweepInterval: -1})
	t.Cleanup(func() { store.Close() })
	return &heldStore{Store: store, n: n, gate: make(chan struct{})}
}

// coldBatch is a batch of n checks of per-key over keys never seen.
func coldBatch(prefix string, n int) string {
	var sb strings.Builder
	sb.WriteString(`{"checks":[`)
	for i := range n {
		if i > 0 {
			sb.WriteByte(',')
		}
		fmt.Fprintf(&sb, `{"rule":"per-key","key":"%s-%d"}`, prefix, i)
	}
	sb.WriteString(`]}`)
	return sb.String()
}

// TestBatchOverlapsStoreCalls: the Store calls of a batch of cold keys are
// in flight together (Manager.TakeMany). The first 8 are held until all 8
// have arrived: a batch decided one check at a time never gets there.
func TestBatchOverlapsStoreCalls(t *testing.T) {
	gs := newHeldStore(t, 8)
	mcfg := lease.DefaultConfig()
	mcfg.StoreTimeout = time.Minute
	mgr := lease.NewManager(gs, mcfg)
	t.Cleanup(func() { mgr.Close() })
	n := New(DefaultConfig(), mgr)
	n.SetRules(mustParse(t, testRules))
	ctx := newCtx("POST", "/v1/checks", coldBatch("cold", 20), "127.0.0.1")
	done := make(chan struct{})
	go func() {
		defer close(done)
		n.Handler()(ctx)
	}()
	ok := gs.waitInflight()
	<-done
	if !ok {
		t.Fatalf("only %d Store calls in flight together, want %d", gs.most.Load(), gs.n)
	}
	body := string(ctx.Response.Body())
	if ctx.Response.StatusCode() != 200 || strings.Count(body, `"allowed":true`) != 20 {
		t.Errorf("status %d %s, want 20 checks allowed", ctx.Response.StatusCode(), body)
	}
}

// TestRoutedBatchOverlapsStoreCalls: the same for the items a clustered
// node owns (a cluster of one owns them all).
func TestRoutedBatchOverlapsStoreCalls(t *testing.T) {
	gs := newHeldStore(t, 8)
	a := newClusterNodes(t, gs, map[string]string{"a": testRules})["a"]
	done := make(chan resp)
	go func() { done <- a.do(t, "POST", "/v1/checks", coldBatch("cold", 20)) }()
	ok := gs.waitInflight()
	r := <-done
	if !ok {
		t.Fatalf("only %d Store calls in flight together, want %d", gs.most.Load(), gs.n)
	}
	if r.status != 200 || strings.Count(r.body, `"allowed":true`) != 20 {
		t.Errorf("status %d %s, want 20 checks allowed", r.status, r.body)
	}
}

// TestBatchSameKeyInOrder: checks of one key in a batch of cold keys are
// decided in the order of the batch, whichever way each is decided (one
// rule, or several by descriptors): per-key has 3 tokens, the first three
// checks of the key get them. Every round uses a new key, so that each
// one's checks all start cold, together with the other keys' Store calls.
func TestBatchSameKeyInOrder(t *testing.T) {
	for _, cluster := range []bool{false, true} {
		t.Run(fmt.Sprint("cluster=", cluster), func(t *testing.T) {
			var do func(body string) resp
			if cluster {
				store := lease.NewMemoryStore(lease.MemoryStoreConfig{})
				t.Cleanup(func() { store.Close() })
				a := newClusterNodes(t, store, map[string]string{"a": testRules})["a"]
				do = func(body string) resp { return a.do(t, "POST", "/v1/checks", body) }
			} else {
				tn := newTestNode(t, testRules)
				do = func(body string) resp { return tn.do("POST", "/v1/checks", body) }
			}
			for round := range 20 {
				k := fmt.Sprintf("same-%d", round)
				var sb strings.Builder
				sb.WriteString(`{"checks":[`)
				var want []string
				for i := range 12 {
					if i > 0 {
						sb.WriteByte(',')
					}
					switch {
					case i%2 == 1: // another key, cold
						fmt.Fprintf(&sb, `{"rule":"per-key","key":"other-%d-%d"}`, round, i)
						want = append(want, "allowed")
					case i == 4: // per-key and global, by descriptors
						fmt.Fprintf(&sb, `{"descriptors":{"api_key":%q}}`, k)
						want = append(want, map[bool]string{true: "allowed", false: "denied"}[len(want) < 5])
					default:
						fmt.Fprintf(&sb, `{"rule":"per-key","key":%q}`, k)
						want = append(want, map[bool]string{true: "allowed", false: "denied"}[len(want) < 5])
					}
				}
				sb.WriteString(`]}`)
				r := do(sb.String())
				if r.status != 200 {
					t.Fatalf("status %d %s", r.status, r.body)
				}
				got := decodeResults(t, r.body)
				for i, res := range got {
					if s := map[bool]string{true: "allowed", false: "denied"}[res.Allowed]; res.Error != "" || s != want[i] {
						t.Fatalf("round %d: result %d is %+v, want %s (the checks of %s: allowed, allowed, allowed, then denied)", round, i, res, want[i], k)
					}
				}
			}
		})
	}
}

func decodeResults(t *testing.T, body string) []api.CheckResult {
	t.Helper()
	var out struct{ Results []api.CheckResult }
	if err := json.Unmarshal([]byte(body), &out); err != nil {
		t.Fatalf("%s: %v", body, err)
	}
	return out.Results
}

// TestOwnerBatchOverlapsStoreCalls: an owner decides the items a peer
// forwards in one batch the way it decides its own (the engine's batch
// path, Manager.TakeMany): their Store calls are in flight together. A
// batch of 20 cold keys owned by b, sent to a: b holds 8 Store calls at
// once (it decided forwarded items one at a time, up to 32 per goroutine,
// and never got there).
func TestOwnerBatchOverlapsStoreCalls(t *testing.T) {
	gs := newHeldStore(t, 8)
	nodes := newClusterNodes(t, gs, map[string]string{"a": testRules, "b": testRules})
	a := nodes["a"]
	var sb strings.Builder
	sb.WriteString(`{"checks":[`)
	for i, n := 0, 0; n < 20; i++ {
		k := fmt.Sprint("owned-by-b-", i)
		if a.n.Owner("per-key:"+k) != "b" {
			continue
		}
		if n > 0 {
			sb.WriteByte(',')
		}
		fmt.Fprintf(&sb, `{"rule":"per-key","key":"%s"}`, k)
		n++
	}
	sb.WriteString(`]}`)
	done := make(chan resp)
	go func() { done <- a.do(t, "POST", "/v1/checks", sb.String()) }()
	ok := gs.waitInflight()
	r := <-done
	if !ok {
		t.Fatalf("only %d Store calls in flight together at the owner, want %d", gs.most.Load(), gs.n)
	}
	if r.status != 200 || strings.Count(r.body, `"allowed":true`) != 20 {
		t.Errorf("status %d %s, want 20 checks allowed", r.status, r.body)
	}
	var m strings.Builder
	a.n.MetricsSet().WritePrometheus(&m)
	if want := `sluice_routed_items_total{decided_by="owner"} 20`; !strings.Contains(m.String(), want) {
		t.Errorf("a's metrics lack %s: the checks were not decided by their owner", want)
	}
}
