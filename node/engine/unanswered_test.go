package engine

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/lease"
)

// The lines about checks decided for silent owners: one when it starts,
// a count per interval while it goes on, one when an interval passes
// without any; never one per check.
func TestFallbackLogLines(t *testing.T) {
	var buf strings.Builder
	var timer func()
	now := time.Unix(1000, 0)
	l := &fallbackLog{log: slog.New(slog.NewTextHandler(&buf, nil)), every: 10 * time.Second, peers: map[string]int64{},
		now:   func() time.Time { return now },
		after: func(_ time.Duration, f func()) func() bool { timer = f; return func() bool { return true } }}
	for range 3 {
		l.note("10.0.0.3:8080")
	}
	l.note("10.0.0.2:8080")
	if n := strings.Count(buf.String(), "\n"); n != 1 || !strings.Contains(buf.String(), `msg="an owner does not answer: deciding its checks here" peer=10.0.0.3:8080`) {
		t.Fatalf("after 4 checks: %d lines, want the one start line:\n%s", n, buf.String())
	}
	now = now.Add(10 * time.Second)
	timer()
	if !strings.Contains(buf.String(), `checks=4 interval=10s peer.10.0.0.2:8080=1 peer.10.0.0.3:8080=3`) {
		t.Fatalf("the interval's count is missing:\n%s", buf.String())
	}
	now = now.Add(10 * time.Second)
	timer()
	if !strings.Contains(buf.String(), `msg="owners answer again: no check decided for a silent owner in the last interval" decided_here=4 for=20s`) {
		t.Fatalf("the end line is missing:\n%s", buf.String())
	}
	if strings.Count(buf.String(), "\n") != 3 {
		t.Errorf("want 3 lines:\n%s", buf.String())
	}
}

// A share is the limit (and burst) over the members last known, never 0.
func TestSharePolicy(t *testing.T) {
	p := lease.Policy{Algorithm: lease.TokenBucket, Limit: 1000, Burst: 300, Period: time.Hour}
	if q := sharePolicy(p, 3); q.Limit != 333 || q.Burst != 100 || q.Period != time.Hour {
		t.Errorf("1000/h burst 300 on 3: %+v, want 333/h burst 100", q)
	}
	if q := sharePolicy(lease.Policy{Algorithm: lease.FixedWindow, Limit: 2, Period: time.Hour}, 5); q.Limit != 1 {
		t.Errorf("2 on 5: limit %d, want 1 (never 0)", q.Limit)
	}
}
