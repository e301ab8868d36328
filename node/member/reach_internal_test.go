package member

import (
	"slices"
	"testing"
	"time"
)

// The quorum's arithmetic on a fake timeline (reachBook is pure).
func TestReachBookQuorum(t *testing.T) {
	t0 := time.Unix(1000, 0)
	r := newReachBook("a", 2, 5*time.Minute, 0)
	if q := r.quorum([]string{"a"}, t0); q.Seen != 1 || q.Known != 1 || q.Minority {
		t.Fatalf("a single node: %+v, want 1 of 1, not the minority", q)
	}
	// b and c join; c has not answered yet: not known, not a minority.
	r.ack("b")
	if q := r.quorum([]string{"a", "b", "c"}, t0); q.Seen != 2 || q.Known != 2 || q.Minority {
		t.Fatalf("c joining, never answered: %+v, want 2 of 2", q)
	}
	r.ack("c")
	if q := r.quorum([]string{"a", "b", "c"}, t0); q.Seen != 3 || q.Known != 3 || q.Minority {
		t.Fatalf("all answer: %+v, want 3 of 3", q)
	}
	// One ping missed (a lost packet, or this node stalled): still there.
	r.miss("b")
	r.miss("c")
	if q := r.quorum([]string{"a", "b", "c"}, t0); q.Seen != 3 {
		t.Fatalf("one ping missed each: %+v, want 3 of 3", q)
	}
	// Cut off: two in a row missed.
	r.miss("b")
	r.miss("c")
	t1 := t0.Add(time.Second)
	q := r.quorum([]string{"a", "b", "c"}, t1)
	if q.Seen != 1 || q.Known != 3 || !q.Minority || !slices.Equal(q.Missing, []string{"b", "c"}) {
		t.Fatalf("cut off: %+v, want 1 of 3 (b, c missing), the minority", q)
	}
	// b answers again: 2 of 3 is a majority; memberlist calling c dead
	// (not live) changes nothing: it is still known.
	r.ack("b")
	if q := r.quorum([]string{"a", "b"}, t1); q.Seen != 2 || q.Known != 3 || q.Minority {
		t.Fatalf("b back, c dead: %+v, want 2 of 3, a majority", q)
	}
	// c is forgotten KnownWindow after it was last seen.
	t2 := t0.Add(5*time.Minute + time.Millisecond)
	if q := r.quorum([]string{"a", "b"}, t2); q.Known != 2 || len(q.Missing) != 0 {
		t.Fatalf("after KnownWindow: %+v, want c forgotten (2 known)", q)
	}
	// A graceful leave shrinks what it knows at once.
	r.left("b")
	if q := r.quorum([]string{"a"}, t2); q.Seen != 1 || q.Known != 1 || q.Minority {
		t.Fatalf("b left: %+v, want 1 of 1", q)
	}
}

// With a stated cluster size the node is the minority below a majority
// of it, even before it saw anyone.
func TestReachBookClusterSize(t *testing.T) {
	t0 := time.Unix(1000, 0)
	r := newReachBook("a", 2, time.Minute, 5)
	if q := r.quorum([]string{"a"}, t0); q.Known != 5 || !q.Minority {
		t.Fatalf("alone of 5: %+v, want the minority", q)
	}
	r.ack("b")
	r.ack("c")
	if q := r.quorum([]string{"a", "b", "c"}, t0); q.Seen != 3 || q.Minority {
		t.Fatalf("3 of 5: %+v, want a majority", q)
	}
}
