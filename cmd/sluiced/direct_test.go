package main

import (
	"io"
	"path/filepath"
	"testing"
)

// TestMemoryStoreDecidesInStore: on the in-memory store a node decides
// every check in the store (lease.Config.Direct: no lease, no bucket),
// unless -memory-leases (SLUICE_MEMORY_LEASES) asks for buckets as on
// Redis; the answers are the same.
func TestMemoryStoreDecidesInStore(t *testing.T) {
	for _, c := range []struct {
		args []string
		env  map[string]string
		want bool
	}{
		{nil, nil, false},
		{[]string{"-memory-leases"}, nil, true},
		{nil, map[string]string{"SLUICE_MEMORY_LEASES": "true"}, true},
		{[]string{"-memory-leases=false"}, map[string]string{"SLUICE_MEMORY_LEASES": "true"}, false},
	} {
		o, err := parseOptions(c.args, env(c.env), io.Discard)
		if err != nil || o.memoryLeases != c.want {
			t.Errorf("%v %v: memory leases %v, %v; want %v", c.args, c.env, o.memoryLeases, err, c.want)
		}
	}
	if _, err := parseOptions([]string{"-memory-leases=maybe"}, env(nil), io.Discard); err == nil {
		t.Error("-memory-leases=maybe: no error")
	}

	rules := filepath.Join(t.TempDir(), "rules.yaml")
	writeFile(t, rules, rulesV1) // per-key: token_bucket, 2 per hour
	for _, leases := range []bool{false, true} {
		args := []string{"-rules", rules}
		if leases {
			args = append(args, "-memory-leases")
		}
		d, base := startLocal(t, args...)
		for i, want := range []int{200, 200, 429} {
			if code, body := doHTTP(t, "POST", base+"/v1/check", `{"rule":"per-key","key":"k"}`); code != want {
				t.Fatalf("memory leases %v, check %d: %d %s, want %d", leases, i+1, code, body, want)
			}
		}
		st := d.mgr.Stats()
		if err := d.stop(true); err != nil {
			t.Error(err)
		}
		switch {
		case !leases && (st.Leases != 0 || st.StoreDecisions != 3 || st.ActiveKeys != 1):
			t.Errorf("in the store: %d lease calls, %d store decisions, %d active keys; want 0, 3, 1", st.Leases, st.StoreDecisions, st.ActiveKeys)
		case leases && st.Leases == 0:
			t.Errorf("-memory-leases: no lease call (%+v)", st)
		}
	}
}
