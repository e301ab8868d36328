package hot

import (
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/lease/clocktest"
	"github.com/sluicehq/sluice/shard"
)

// advance moves c forward by d and returns the new time, for Tick.
func advance(c *clocktest.Clock, d time.Duration) time.Time {
	c.Advance(d)
	return c.Now()
}

// capture is an Announcer that keeps what it is given.
type capture struct {
	mu   sync.Mutex
	msgs [][]byte
	err  error // returned by Broadcast when set
}

func (c *capture) Broadcast(msg []byte) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		return c.err
	}
	c.msgs = append(c.msgs, slices.Clone(msg))
	return nil
}

// take returns the plans broadcast since the last take, decoded.
func (c *capture) take(t *testing.T) []shard.Plan {
	t.Helper()
	c.mu.Lock()
	msgs := c.msgs
	c.msgs = nil
	c.mu.Unlock()
	var all []shard.Plan
	for _, m := range msgs {
		if len(m) > MaxMessageSize {
			t.Fatalf("message of %d bytes, above %d", len(m), MaxMessageSize)
		}
		ps, err := DecodePlans(nil, m)
		if err != nil {
			t.Fatalf("broadcast an undecodable message: %v", err)
		}
		all = append(all, ps...)
	}
	return all
}

// bus is an in-process gossip: what one member broadcasts is queued for
// every other member and delivered by flush (a seam we own, in the
// spirit of memberlist's MockTransport).
type bus struct {
	mu      sync.Mutex
	members map[string]*Hot
	queue   []busMsg
}

type busMsg struct {
	from string
	msg  []byte
}

func newBus() *bus { return &bus{members: map[string]*Hot{}} }

// port is the Announcer of member name.
type port struct {
	b    *bus
	name string
}

func (p port) Broadcast(msg []byte) error {
	p.b.mu.Lock()
	defer p.b.mu.Unlock()
	p.b.queue = append(p.b.queue, busMsg{p.name, slices.Clone(msg)})
	return nil
}

// flush delivers the queued messages (and those they cause) to every
// member but their sender.
func (b *bus) flush() {
	for {
		b.mu.Lock()
		q := b.queue
		b.queue = nil
		b.mu.Unlock()
		if len(q) == 0 {
			return
		}
		for _, m := range q {
			for name, h := range b.members {
				if name != m.from {
					h.Receive(m.msg)
				}
			}
		}
	}
}

// drop discards the queued messages (gossip lost).
func (b *bus) drop() {
	b.mu.Lock()
	b.queue = nil
	b.mu.Unlock()
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// testConfig is an exact sketch (no sampling) with thresholds from rules.
func testConfig(self string, c *clocktest.Clock, threshold float64, split int) Config {
	cfg := DefaultConfig()
	cfg.Self = self
	cfg.TopK = shard.TopKConfig{K: 16}
	cfg.Split = shard.SplitConfig{Cooling: 5 * time.Second}
	cfg.Threshold = func(string) (float64, int, bool) { return threshold, split, true }
	cfg.Now = c.Now
	cfg.Logger = quiet()
	return cfg
}

func newHot(t *testing.T, cfg Config, a Announcer) *Hot {
	t.Helper()
	h, err := New(cfg, a)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Close)
	return h
}

// keyOwnedBy returns a counter key whose first n owners on r are want.
func keyOwnedBy(t *testing.T, r *shard.Ring, want ...string) string {
	t.Helper()
	for i := range 100000 {
		k := fmt.Sprintf("per-key:user-%d", i)
		if slices.Equal(r.OwnerN(k, len(want), nil), want) {
			return k
		}
	}
	t.Fatalf("no key owned by %v", want)
	return ""
}

// observe records n checks of key.
func observe(h *Hot, key string, n int) {
	for range n {
		h.Observe(key)
	}
}

var members4 = []string{"n1", "n2", "n3", "n4"}

func ring(members ...string) *shard.Ring { return shard.NewRing(members, 256) }

func planKeys(ps []shard.Plan) []string {
	var ks []string
	for _, p := range ps {
		ks = append(ks, p.Key)
	}
	return ks
}
