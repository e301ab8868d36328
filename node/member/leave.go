package member

import (
	"fmt"
	"time"
)

// Leave tells the cluster this node is leaving, waiting up to timeout for
// the news to spread; the others then see it as left (not failed) and it
// never rejoins. Call Close afterwards.
func (c *Cluster) Leave(timeout time.Duration) error {
	if c.closed() {
		return ErrClosed
	}
	c.leaving.Store(true)
	// Flag the meta first so that the others can tell a leave from a
	// failure; half the time budget goes to spreading the flag.
	start := time.Now()
	c.setMeta(meta{httpAddr: c.httpAddr, leaving: true})
	if err := c.ml.UpdateNode(timeout / 2); err != nil {
		c.log.Warn("cannot spread the leaving flag", "err", err)
	}
	if err := c.ml.Leave(max(timeout-time.Since(start), 0)); err != nil {
		return fmt.Errorf("cannot leave the cluster: %w", err)
	}
	c.log.Info("left the cluster")
	return nil
}
