package member_test

import (
	"bytes"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"github.com/sluicehq/sluice/lease/clocktest"
	"github.com/sluicehq/sluice/node/member"
)

// syncBuffer is a log destination safe for memberlist's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// lines returns the logged lines holding substr.
func (s *syncBuffer) lines(substr string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for l := range strings.Lines(s.b.String()) {
		if strings.Contains(l, substr) {
			out = append(out, l)
		}
	}
	return out
}

// TestStrangerPacketsDoNotFloodTheLog: a stranger sending packets to the
// gossip port of a keyed node (which cannot decrypt them) gets one log line
// per 10s of the node's clock, which counts the lines it suppressed, and
// every packet in sluice_gossip_rejected_packets_total.
func TestStrangerPacketsDoNotFloodTheLog(t *testing.T) {
	var logs syncBuffer
	clk := clocktest.New()
	set := metrics.NewSet()
	cfg := fastConfig("keyed")
	cfg.BindAddr = "127.0.0.1:0"
	cfg.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	cfg.Metrics = set
	cfg.Now = clk.Now
	c, err := member.Start(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })

	conn, err := net.Dial("udp", c.LocalAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	rejected := set.GetOrCreateCounter("sluice_gossip_rejected_packets_total")
	// send sends n packets and waits until the node has refused them all
	// (loopback UDP does not drop 60 small packets; the wait is bounded).
	send := func(n int) {
		t.Helper()
		want := rejected.Get() + uint64(n)
		for i := range n {
			if _, err := conn.Write([]byte("not gossip, packet " + strings.Repeat("x", i))); err != nil {
				t.Fatal(err)
			}
		}
		clocktest.Eventually(t, 10*time.Second, "the packets to be refused", func() bool { return rejected.Get() >= want })
	}
	const refused = "Decrypt packet failed"

	send(60)
	if got := logs.lines(refused); len(got) != 1 || !strings.Contains(got[0], "suppressed=0") {
		t.Fatalf("60 packets: %d lines %q, want 1 (with suppressed=0)", len(got), got)
	}
	if n := rejected.Get(); n != 60 {
		t.Fatalf("sluice_gossip_rejected_packets_total = %d, want 60", n)
	}

	// Streams of strangers (TCP) are refused and counted the same way.
	before := rejected.Get()
	for range 3 {
		tc, err := net.Dial("tcp", c.LocalAddr())
		if err != nil {
			t.Fatal(err)
		}
		_, _ = tc.Write([]byte("not gossip either"))
		tc.Close()
	}
	clocktest.Eventually(t, 10*time.Second, "the streams to be refused", func() bool { return rejected.Get() >= before+3 })
	if got := logs.lines("failed to receive"); len(got) != 0 {
		t.Fatalf("3 streams within the interval: lines %q, want none", got)
	}

	clk.Advance(9 * time.Second)
	send(5)
	if got := logs.lines(refused); len(got) != 1 {
		t.Fatalf("5 more packets 9s later: %d lines, want still 1", len(got))
	}

	clk.Advance(time.Second)
	send(1)
	got := logs.lines(refused)
	if len(got) != 2 || !strings.Contains(got[1], "suppressed=67") || !strings.Contains(got[1], "level=ERROR") {
		t.Fatalf("a packet 10s after the first line: lines %q, want a second ERROR line with suppressed=67 (64 packets, 3 streams)", got)
	}
}
