package hot

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/sluicehq/sluice/lease/clocktest"
	"github.com/sluicehq/sluice/lease/logkey"
	"github.com/sluicehq/sluice/shard"
)

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

// TestLogsHideKeys: the lines of a split, its end and a plan that cannot
// be encoded name the rule and the key's hash, never the key.
func TestLogsHideKeys(t *testing.T) {
	r := ring(members4...)
	key := keyOwnedBy(t, r, "n1")
	_, user, _ := strings.Cut(key, ":")
	var logs lockedBuffer
	c := clocktest.New()
	cfg := testConfig("n1", c, 1000, 2)
	cfg.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	h := newHot(t, cfg, &capture{})
	h.SetRing(r)
	h.Tick(c.Now())
	heat(c, h, key, 3000)
	for range 30 {
		heat(c, h, key, 1)
	}
	if s := h.Stats(); s.Started != 1 || s.Ended != 1 {
		t.Fatalf("stats %+v, want one split started and ended", s)
	}
	out := logs.String()
	for _, msg := range []string{`msg="hot key split" `, `msg="hot key split ended" `} {
		found := false
		for line := range strings.Lines(out) {
			found = found || strings.Contains(line, msg) && strings.Contains(line, " rule=per-key keyhash="+logkey.Hash(user)+" ")
		}
		if !found {
			t.Errorf("no line %s with the rule and the key's hash in:\n%s", msg, out)
		}
	}
	if strings.Contains(out, user) {
		t.Errorf("a key is in the log:\n%s", out)
	}
	// An encoding error names the plan the same way.
	_, errs := EncodePlans([]shard.Plan{{Key: "per-key:" + strings.Repeat("s", MaxKeyLen+1), Epoch: 1}})
	if len(errs) != 1 || strings.Contains(errs[0].Error(), "sss") || !strings.Contains(errors.Unwrap(errs[0]).Error(), "key") {
		t.Errorf("EncodePlans errors %v, want one naming the plan by its hash", errs)
	}
}
