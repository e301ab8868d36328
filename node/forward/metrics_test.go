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
	f := newForwarder(t, Config{})
	if _, err := f.Forward(context.Background(), s.addr, Item{Op: OpCheck, Rule: "r", Key: "k", Hits: 1}); err != nil {
		t.Fatal(err)
	}
	label := `peer="` + s.addr + `"`
	exposed := func() bool {
		var b bytes.Buffer
		metrics.WritePrometheus(&b, false)
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
