package member_test

import (
	"sync"
	"testing"
	"time"
)

// TestEveryoneLeavesAtOnce: a whole cluster stopped at once (SIGTERM to
// every node) leaves cleanly. memberlist's Leave waits until its leave
// message was sent a number of times, and it sends only to members not
// known to have left: once every other member left, nobody remains to
// send to, and Leave used to wait out its timeout and fail although
// nobody was left to tell.
func TestEveryoneLeavesAtOnce(t *testing.T) {
	a, b, c := cluster3(t)
	const timeout = 10 * time.Second // a bound: the leaves end long before
	var wg sync.WaitGroup
	for _, n := range []*node{a, b, c} {
		wg.Go(func() {
			if err := n.Leave(timeout); err != nil {
				t.Errorf("%s: Leave: %v", n.LocalName(), err)
			}
		})
	}
	wg.Wait()
}
