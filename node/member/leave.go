package member

import (
	"fmt"
	"sync/atomic"
	"time"
)

// Leave tells the cluster this node is leaving, waiting up to timeout for
// the news to spread; the others then see it as left (not failed) and it
// never rejoins. Call Close afterwards.
//
// The wait ends early when no other member is alive any more, as when a
// whole cluster is stopped at once: nobody is left to tell. (memberlist
// waits until its leave message was sent a number of times, and sends only
// to members that have not left; alone, it would wait out the timeout and
// report a failure. Its wait then goes on in the background until timeout,
// holding nothing.)
func (c *Cluster) Leave(timeout time.Duration) error {
	if c.closed() {
		return ErrClosed
	}
	c.leaving.Store(true)
	// Flag the meta first so that the others can tell a leave from a
	// failure; half the time budget goes to spreading the flag.
	deadline := time.Now().Add(timeout)
	c.setMeta(meta{httpAddr: c.httpAddr, leaving: true})
	if err := c.untilTold(&c.selfLeave.flagged, func() error { return c.ml.UpdateNode(timeout / 2) }); err != nil {
		c.log.Warn("cannot spread the leaving flag", "err", err)
	}
	if err := c.untilTold(&c.selfLeave.left, func() error { return c.ml.Leave(max(time.Until(deadline), 0)) }); err != nil {
		return fmt.Errorf("cannot leave the cluster: %w", err)
	}
	c.log.Info("left the cluster")
	return nil
}

// selfLeave records the events memberlist reports about this node while it
// leaves.
type selfLeave struct {
	flagged atomic.Bool // the leaving flag is in this node's state (and queued for gossip)
	left    atomic.Bool // this node is marked left (and the news queued for gossip)
}

// untilTold runs spread, a memberlist call that queues news about this node
// and waits until it was gossiped enough (or its own timeout), and returns
// its error; or nil as soon as the news is queued (queued turns true) and
// no other member is alive to hear it.
func (c *Cluster) untilTold(queued *atomic.Bool, spread func() error) error {
	done := make(chan error, 1)
	go func() { done <- spread() }()
	for {
		select {
		case err := <-done:
			return err
		case <-c.leaveWake:
			// Every event callback signals leaveWake after it has
			// recorded what it saw, so no change is missed.
			if queued.Load() && !c.othersAlive() {
				return nil
			}
		}
	}
}

// othersAlive reports whether a member other than this node is alive (or
// suspect).
func (c *Cluster) othersAlive() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for name := range c.mu.live {
		if name != c.cfg.Name {
			return true
		}
	}
	return false
}
