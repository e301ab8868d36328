package rls

import (
	"time"
)

// TransportLean's idle connections.

// idleIfDoneLocked starts the connection's idle time once its last
// stream is gone (a stream whose worker runs, reset by the peer or not,
// keeps it busy).
func (c *leanConn) idleIfDoneLocked() {
	if c.idle != nil && len(c.streams) == 0 && c.orphans == 0 {
		c.idleSince = time.Now()
	}
}

// idleCheck, the idle timer's, says GOAWAY on a connection that has had no
// stream for the idle timeout, as Close does on every connection: its
// drain closes it. A busy connection, or one idle for less, checks again
// when it may have been idle for the timeout.
func (c *leanConn) idleCheck() {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.closed || c.goingAway {
		return
	}
	d := c.s.cfg.IdleTimeout
	if len(c.streams) > 0 || c.orphans > 0 {
		c.idle.Reset(d)
		return
	}
	if left := d - time.Since(c.idleSince); left > 0 {
		c.idle.Reset(left)
		return
	}
	c.goAwayLocked()
}
