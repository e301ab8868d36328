package hot

import (
	"testing"

	"github.com/VictoriaMetrics/metrics"

	"github.com/sluicehq/sluice/lease/clocktest"
)

// TestMetricsPerSet: two Hots in one process (two nodes of a test
// cluster), each with its own set, keep separate counts under the same
// names.
func TestMetricsPerSet(t *testing.T) {
	r := ring(members4...)
	key := keyOwnedBy(t, r, "n1")
	c := clocktest.New()
	sets := [2]*metrics.Set{metrics.NewSet(), metrics.NewSet()}
	var hs [2]*Hot
	for i, name := range []string{"n1", "n2"} {
		cfg := testConfig(name, c, 1000, 0)
		cfg.Metrics = sets[i]
		hs[i] = newHot(t, cfg, &capture{})
		hs[i].SetRing(r)
		hs[i].Tick(c.Now())
	}
	heat(c, hs[0], key, 3000) // n1 owns key: it splits it; n2 sees nothing
	for i, want := range []uint64{1, 0} {
		if got := sets[i].GetOrCreateCounter(`sluice_hot_splits_started_total`).Get(); got != want {
			t.Errorf("n%d: sluice_hot_splits_started_total = %d, want %d", i+1, got, want)
		}
		if got := sets[i].GetOrCreateGauge(`sluice_hot_splits_active`, nil).Get(); got != float64(want) {
			t.Errorf("n%d: sluice_hot_splits_active = %v, want %d", i+1, got, want)
		}
	}
}
