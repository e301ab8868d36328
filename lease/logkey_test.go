package lease

import (
	"bytes"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/lease/clocktest"
	"github.com/sluicehq/sluice/lease/logkey"
)

// lockedBuffer is a log destination safe for the Manager's goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestLogsHideKeys: the Manager's lines about a key (a check decided
// without the Store, at debug; local-mode admissions it could not charge
// and tokens it could not return, at warn) name the rule and the key's
// hash, never the key.
func TestLogsHideKeys(t *testing.T) {
	const key = "per-key:SECRET-TENANT-KEY"
	var logs lockedBuffer
	clk := clocktest.New()
	fs := newFaultStore(clk.Now)
	cfg := DefaultConfig()
	cfg.Now = clk.Now
	cfg.SweepInterval = -1
	cfg.StoreTimeout = time.Minute
	cfg.Breaker = BreakerConfig{Failures: 1, Cooldown: time.Second, AfterFunc: clk.AfterFunc}
	cfg.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	m := NewManager(fs, cfg)
	p := Policy{Algorithm: TokenBucket, Limit: 100, Period: time.Hour, OnFailure: FailLocal}
	mustTake(t, m, key, p, 1) // leases tokens
	m.drain()
	fs.mode.Store(faultError)
	clk.Advance(time.Hour) // the lease is due for renewal
	for range 5 {
		mustTake(t, m, key, p, 1)
	}
	_ = m.Close() // fails: the Store is down

	out := logs.String()
	h := " rule=per-key keyhash=" + logkey.Hash("SECRET-TENANT-KEY")
	for _, want := range []string{
		`msg="store unavailable"` + h,
		`msg="cannot charge the Store for local-mode admissions"` + h,
		`msg="cannot return leased tokens"` + h,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("no line with %s in:\n%s", want, out)
		}
	}
	if strings.Contains(out, "SECRET") {
		t.Errorf("a key is in the log:\n%s", out)
	}
}
