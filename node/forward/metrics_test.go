package forward

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/VictoriaMetrics/metrics"
)

// TestRemovePeerDropsItsMetrics: a peer that leaves takes its labelled
// series with it, so pod churn does not grow /metrics forever (finding 6).
func TestRemovePeerDropsItsMetrics(t *testing.T) {
	s := startServer(t, NewHandler(HandlerConfig{}, &echoDecider{}))
	set := metrics.NewSet()
	f := newForwarder(t, Config{Metrics: set})
	if _, err := f.Forward(context.Background(), s.addr, Item{Op: OpCheck, Rule: "r", Key: "k", Hits: 1}); err != nil {
		t.Fatal(err)
	}
	label := `peer="` + s.addr + `"`
	exposed := func() bool {
		var b bytes.Buffer
		set.WritePrometheus(&b)
		return strings.Contains(b.String(), label)
	}
	if !exposed() {
		t.Fatalf("no series with %s while the peer is in use", label)
	}
	f.RemovePeer(s.addr)
	if exposed() {
		t.Errorf("series with %s remain after RemovePeer", label)
	}
}

// TestMetricsPerSet: two Forwarders and two handlers in one process (two
// nodes of a test cluster), each pair with its own set, keep separate
// counts under the same names; nil sets share the process's default one.
func TestMetricsPerSet(t *testing.T) {
	// The default set holds the series of the package's other tests, whose
	// peers' ports the servers below may be given again: only the lines
	// this test adds or changes count.
	defaultLines := func() map[string]bool {
		var b bytes.Buffer
		metrics.WritePrometheus(&b, false)
		lines := map[string]bool{}
		for l := range strings.Lines(b.String()) {
			lines[l] = true
		}
		return lines
	}
	before := defaultLines()
	sets := [2]*metrics.Set{metrics.NewSet(), metrics.NewSet()}
	var servers [2]*server
	var fwds [2]*Forwarder
	for i, set := range sets {
		servers[i] = startServer(t, NewHandler(HandlerConfig{Metrics: set}, &echoDecider{}))
		fwds[i] = newForwarder(t, Config{Metrics: set})
	}
	// Node 0 forwards 3 items to node 1, and node 1 one item to node 0.
	for range 3 {
		if _, err := fwds[0].Forward(context.Background(), servers[1].addr, Item{Op: OpCheck, Rule: "r", Key: "k", Hits: 1}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := fwds[1].Forward(context.Background(), servers[0].addr, Item{Op: OpCheck, Rule: "r", Key: "k", Hits: 1}); err != nil {
		t.Fatal(err)
	}
	count := func(set *metrics.Set, name string) uint64 { return set.GetOrCreateCounter(name).Get() }
	sent := func(to int) string { return `sluice_forward_items_total{peer="` + servers[to].addr + `"}` }
	for _, c := range []struct {
		set  int
		name string
		want uint64
	}{
		{0, sent(1), 3},
		{1, sent(0), 1},
		{0, sent(0), 0}, // node 1's series is not in node 0's set
		{1, sent(1), 0},
		{0, `sluice_forward_served_items_total`, 1},
		{1, `sluice_forward_served_items_total`, 3},
	} {
		if got := count(sets[c.set], c.name); got != c.want {
			t.Errorf("set %d: %s = %d, want %d", c.set, c.name, got, c.want)
		}
	}
	for l := range defaultLines() {
		for _, s := range servers {
			if !before[l] && strings.Contains(l, `"`+s.addr+`"`) {
				t.Errorf("the default set has a series of a Forwarder or handler given its own set: %s", l)
			}
		}
	}
}
