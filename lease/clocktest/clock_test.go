package clocktest_test

import (
	"slices"
	"testing"
	"time"

	"github.com/sluicehq/sluice/lease/clocktest"
)

func TestAdvanceRunsTimersInOrderAtTheirInstant(t *testing.T) {
	c := clocktest.New()
	var got []string
	at := func(name string) func() {
		return func() { got = append(got, name+"@"+c.Now().Sub(clocktest.Epoch).String()) }
	}
	c.AfterFunc(3*time.Second, at("c"))
	c.AfterFunc(time.Second, at("a"))
	stop := c.AfterFunc(2*time.Second, at("stopped"))
	c.AfterFunc(time.Second, func() {
		at("b")()
		c.AfterFunc(time.Second, at("chained")) // set from a timer: due at 2s
	})
	if !stop() || stop() {
		t.Fatal("stop: want true once, then false")
	}
	c.Advance(2500 * time.Millisecond)
	if want := []string{"a@1s", "b@1s", "chained@2s"}; !slices.Equal(got, want) {
		t.Fatalf("after 2.5s: %v, want %v", got, want)
	}
	if c.Timers() != 1 {
		t.Fatalf("Timers() = %d, want 1", c.Timers())
	}
	c.Advance(time.Second)
	if got[len(got)-1] != "c@3s" || c.Now().Sub(clocktest.Epoch) != 3500*time.Millisecond {
		t.Fatalf("after 3.5s: %v at %v", got, c.Now())
	}
}

func TestSetMovesBothWays(t *testing.T) {
	c := clocktest.New()
	fired := false
	c.AfterFunc(time.Second, func() { fired = true })
	c.Set(clocktest.Epoch.Add(-time.Hour))
	if fired || !c.Now().Equal(clocktest.Epoch.Add(-time.Hour)) {
		t.Fatalf("back: now %v, fired %v; want an hour before Epoch, not fired", c.Now(), fired)
	}
	c.Set(clocktest.Epoch.Add(2 * time.Second))
	if !fired || !c.Now().Equal(clocktest.Epoch.Add(2*time.Second)) {
		t.Fatalf("forward: now %v, fired %v; want Epoch+2s, fired", c.Now(), fired)
	}
}
