package forward

import (
	"testing"
	"time"
)

// TestAdaptiveTimeout: a peer's request timeout follows its round trips
// (RFC 6298: 2 × (srtt + 4·rttvar)), never below Timeout nor above
// MaxTimeout; a timed-out request counts as a round trip of its timeout,
// so a peer that keeps timing out gets up to MaxTimeout. Pure: the round
// trips are passed in.
func TestAdaptiveTimeout(t *testing.T) {
	f := newForwarder(t, Config{Timeout: 50 * time.Millisecond})
	if got := f.MaxTimeout(); got != 100*time.Millisecond {
		t.Fatalf("MaxTimeout %s, want 2 × Timeout", got)
	}
	p, err := f.peer(closedAddr(t))
	if err != nil {
		t.Fatal(err)
	}
	cur := func() time.Duration { return time.Duration(p.timeout.Load()) }
	if cur() != 50*time.Millisecond {
		t.Fatalf("timeout %s before any round trip, want Timeout", cur())
	}
	for range 20 { // a fast peer: the floor
		p.observe(300 * time.Microsecond)
	}
	if cur() != 50*time.Millisecond {
		t.Errorf("timeout %s after fast round trips, want Timeout (50ms)", cur())
	}
	for range 20 { // a loaded owner answering in 60ms
		p.observe(60 * time.Millisecond)
	}
	if c := cur(); c <= 60*time.Millisecond || c > 100*time.Millisecond {
		t.Errorf("timeout %s after 60ms round trips, want above 60ms, at most 100ms", c)
	}
	for range 50 { // timing out at whatever the timeout is
		p.observe(cur())
	}
	if cur() != 100*time.Millisecond {
		t.Errorf("timeout %s after timeouts, want MaxTimeout (100ms)", cur())
	}
	for range 200 { // the owner recovers
		p.observe(time.Millisecond)
	}
	if cur() != 50*time.Millisecond {
		t.Errorf("timeout %s after recovery, want Timeout (50ms)", cur())
	}

	f2 := New(Config{Timeout: 50 * time.Millisecond, MaxTimeout: time.Millisecond}) // no peer: no goroutine
	defer f2.Close()
	if got := f2.MaxTimeout(); got != 50*time.Millisecond {
		t.Errorf("MaxTimeout below Timeout: %s, want Timeout", got)
	}
	if err := (Config{MaxTimeout: -1}).Validate(); err == nil || err.Error() != "forward: max_timeout: must be ≥ 0, got -1ns" {
		t.Errorf("Validate of a negative MaxTimeout: %v", err)
	}
}
