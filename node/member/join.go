package member

import (
	"fmt"
	"net/netip"
	"slices"
	"time"
)

// Join contacts every seed and returns how many answered. When none did, it
// returns an error and keeps retrying in the background, with a pause
// doubling from Config.JoinRetryMin to Config.JoinRetryMax, until one
// answers or the Cluster is closed. Seeds equal to this node's own gossip
// address are skipped; with no other seed, Join returns 0, nil and the
// Cluster is ready.
func (c *Cluster) Join(seeds []string) (int, error) {
	if c.closed() || c.leaving.Load() {
		return 0, ErrClosed
	}
	for i, s := range seeds {
		if _, _, err := splitHostPort(s); err != nil {
			return 0, fmt.Errorf("%w: seeds[%d]: %v", ErrConfig, i, err)
		}
	}
	seeds = c.notSelf(seeds)
	if len(seeds) == 0 {
		c.ready.Store(true)
		return 0, nil
	}
	c.setSeeds(seeds)
	n, err := c.ml.Join(seeds)
	if n > 0 {
		c.markJoined(n, len(seeds))
		return n, nil
	}
	c.startJoinLoop(c.cfg.JoinRetryMin)
	return 0, fmt.Errorf("cannot join any of %d seeds (retrying in the background): %w", len(seeds), err)
}

func (c *Cluster) markJoined(n, of int) {
	if !c.ready.Swap(true) {
		c.log.Info("joined the cluster", "seeds_answered", n, "seeds", of)
	}
}

// startJoinLoop retries the latest seeds given to Join (or Config.Join) in
// the background after a first pause of first, until one answers, unless a
// join loop already runs (it picks the new seeds up).
func (c *Cluster) startJoinLoop(first time.Duration) {
	if !c.joinActive.CompareAndSwap(false, true) {
		return
	}
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		defer c.joinActive.Store(false)
		pause := first
		for attempt := 1; ; attempt++ {
			if pause > 0 {
				t := time.NewTimer(pause)
				select {
				case <-c.stop:
					t.Stop()
					return
				case <-t.C:
				}
			}
			if c.closed() || c.leaving.Load() {
				return
			}
			c.mu.Lock()
			seeds := c.mu.seeds
			c.mu.Unlock()
			n, err := c.ml.Join(seeds)
			if n > 0 {
				c.markJoined(n, len(seeds))
				return
			}
			c.log.Warn("cannot join the cluster yet", "attempt", attempt, "err", err)
			pause = min(max(2*pause, c.cfg.JoinRetryMin), c.cfg.JoinRetryMax)
		}
	}()
}

// runReconnect periodically rejoins failed members, and the seeds when this
// node is alone, so that healed partitions merge.
func (c *Cluster) runReconnect() {
	defer c.wg.Done()
	c.every(c.cfg.ReconnectInterval, func() {
		if c.leaving.Load() || !c.ready.Load() {
			return
		}
		targets := c.reconnectTargets(time.Now())
		if len(targets) == 0 {
			return
		}
		n, err := c.ml.Join(targets)
		if n > 0 {
			c.log.Info("reconnected", "answered", n, "tried", len(targets))
		} else {
			c.log.Debug("cannot reconnect", "tried", len(targets), "err", err)
		}
	})
}

// reconnectTargets returns the gossip addresses of failed members still
// worth retrying, plus the seeds when this node is alone, and forgets
// departures older than ReconnectTimeout.
func (c *Cluster) reconnectTargets(now time.Time) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	alone := len(c.mu.live) <= 1
	var targets []string
	for name, d := range c.mu.departed {
		if now.Sub(d.at) > c.cfg.ReconnectTimeout {
			delete(c.mu.departed, name)
			continue
		}
		if d.m.State == StateDead && d.m.GossipAddr != "" {
			targets = append(targets, d.m.GossipAddr)
		}
	}
	if alone {
		for _, s := range c.mu.seeds {
			if !slices.Contains(targets, s) {
				targets = append(targets, s)
			}
		}
	}
	slices.Sort(targets)
	return slices.Compact(targets)
}

func (c *Cluster) setSeeds(seeds []string) {
	c.mu.Lock()
	c.mu.seeds = slices.Clone(seeds)
	c.mu.Unlock()
}

// notSelf drops the seeds that are this node's own gossip address.
func (c *Cluster) notSelf(seeds []string) []string {
	self := normAddr(c.localAddr)
	var out []string
	for _, s := range seeds {
		if normAddr(s) != self {
			out = append(out, s)
		}
	}
	return out
}

func normAddr(a string) string {
	if ap, err := netip.ParseAddrPort(a); err == nil {
		return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port()).String()
	}
	return a
}
