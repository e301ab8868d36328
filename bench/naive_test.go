package bench

import (
	"context"
	"os/exec"
	"sync"
	"testing"
	"time"
)

// TestNaiveDriver runs the naive counter against a real redis-server: a
// window admits Limit hits and denies the rest, the next window starts at
// 0, and each window's key expires with the window.
func TestNaiveDriver(t *testing.T) {
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Skip("redis-server not installed")
	}
	p, addr, err := StartRedis("", t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer p.Stop(5 * time.Second)
	now := time.UnixMilli(1_700_000_000_250) // 250ms into a window
	keys := KeyConfig{Keys: 2, Prefix: "n"}.KeyNames()
	d, err := NewNaiveDriver(NaiveConfig{Addr: addr, Keys: keys, Limit: Limit{Limit: 3, Period: time.Second, Burst: 3}, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	s, _ := d.NewSession()
	out := make([]Outcome, 5)
	if err := s.Do([]int32{0, 0, 1, 0, 0}, out); err != nil {
		t.Fatal(err)
	}
	want := []Outcome{Allowed, Allowed, Allowed, Allowed, Denied}
	for i := range want {
		if out[i] != want[i] {
			t.Fatalf("window 1: outcomes %v, want %v", out, want)
		}
	}
	if v, err := redisCommand(context.Background(), addr, "GET", "naive:n0:1700000000000"); err != nil || string(v) != "4" {
		t.Errorf("window 1 count of n0 = %q, %v; want 4 (denied hits count, as in envoyproxy/ratelimit)", v, err)
	}
	now = now.Add(time.Second)
	if err := s.Do([]int32{0}, out[:1]); err != nil || out[0] != Allowed {
		t.Errorf("next window: %v, %v; want allowed", out[0], err)
	}
}

// TestCycleOrder: a Cycle run checks the keys in order whichever worker
// sends them, so each key comes back once per cycle.
func TestCycleOrder(t *testing.T) {
	d := &orderDriver{}
	_, err := Run(context.Background(), d, RunConfig{Mode: Open, Rate: 2000, Duration: 50 * time.Millisecond, Workers: 8, Keys: KeyConfig{Keys: 7, Dist: Cycle}})
	if err != nil {
		t.Fatal(err)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.seen) < 20 {
		t.Fatalf("%d checks, want ≥ 20", len(d.seen))
	}
	count := make([]int, 7)
	for _, k := range d.seen {
		count[k]++
	}
	for k, c := range count {
		if c < len(d.seen)/7 || c > len(d.seen)/7+1 {
			t.Errorf("key %d checked %d times in %d checks, want every key once per cycle: %v", k, c, len(d.seen), count)
		}
	}
}

type orderDriver struct {
	mu   sync.Mutex
	seen []int32
}

func (d *orderDriver) Name() string                 { return "order" }
func (d *orderDriver) Close() error                 { return nil }
func (d *orderDriver) NewSession() (Session, error) { return d, nil }
func (d *orderDriver) Do(keys []int32, out []Outcome) error {
	d.mu.Lock()
	d.seen = append(d.seen, keys...)
	d.mu.Unlock()
	for i := range out {
		out[i] = Allowed
	}
	return nil
}
