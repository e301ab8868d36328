package member

import (
	"slices"
	"time"

	"github.com/hashicorp/memberlist"
)

// Members returns the live members (alive or suspect), this node included
// unless it has left, sorted by name.
func (c *Cluster) Members() []Member {
	c.mu.Lock()
	out := make([]Member, 0, len(c.mu.live))
	for _, m := range c.mu.live {
		out = append(out, m)
	}
	c.mu.Unlock()
	slices.SortFunc(out, func(a, b Member) int { return cmpString(a.Name, b.Name) })
	return out
}

// View returns Members followed by the members remembered as dead or left
// (up to ReconnectTimeout after they went), each part sorted by name: what
// /v1/members shows.
func (c *Cluster) View() []Member {
	live := c.Members()
	c.mu.Lock()
	gone := make([]Member, 0, len(c.mu.departed))
	for _, d := range c.mu.departed {
		gone = append(gone, d.m)
	}
	c.mu.Unlock()
	gone = slices.DeleteFunc(gone, func(g Member) bool {
		return slices.ContainsFunc(live, func(m Member) bool { return m.Name == g.Name })
	})
	slices.SortFunc(gone, func(a, b Member) int { return cmpString(a.Name, b.Name) })
	now := c.cfg.Now()
	c.reach.Lock()
	for i := range live {
		live[i].Answering = c.reach.book.answering(live[i].Name, now)
	}
	c.reach.Unlock()
	return append(live, gone...)
}

// signal marks the view dirty without blocking.
func (c *Cluster) signal() {
	select {
	case c.changed <- struct{}{}:
	default:
	}
	select {
	case c.leaveWake <- struct{}{}:
	default:
	}
}

// runEvents delivers views to onChange, serially, skipping unchanged ones.
func (c *Cluster) runEvents() {
	defer c.wg.Done()
	var last []Member
	first := true
	for {
		select {
		case <-c.stop:
			return
		case <-c.changed:
		}
		view := c.Members()
		if !first && sameView(view, last) {
			continue
		}
		first = false
		last = view
		c.log.Debug("membership changed", "members", len(view))
		if c.onChange != nil {
			c.onChange(slices.Clone(view))
		}
	}
}

// sameView compares the fields the ring depends on (not State: a member
// turning suspect changes no owner).
func sameView(a, b []Member) bool {
	return slices.EqualFunc(a, b, func(x, y Member) bool {
		return x.Name == y.Name && x.GossipAddr == y.GossipAddr && x.HTTPAddr == y.HTTPAddr
	})
}

// toMemberMeta converts n (State alive) and returns its meta too. It must
// only be called from an event callback: memberlist mutates a Node under
// its own lock, which it holds during callbacks, so reading a *Node
// anywhere else (for example the result of Memberlist.Members) is a data
// race.
func (c *Cluster) toMemberMeta(n *memberlist.Node) (Member, meta) {
	m := Member{Name: n.Name, GossipAddr: n.Address(), State: StateAlive}
	md, err := decodeMeta(n.Meta)
	if err != nil {
		c.log.Debug("unreadable node meta", "member", n.Name, "err", err)
	}
	m.HTTPAddr = md.httpAddr
	return m, md
}

// events is the Cluster seen as a memberlist.EventDelegate. Its methods
// only record departures and mark the view dirty: they never block.
type events Cluster

func (e *events) NotifyJoin(n *memberlist.Node) {
	c := (*Cluster)(e)
	m, _ := c.toMemberMeta(n)
	c.mu.Lock()
	delete(c.mu.departed, n.Name)
	c.mu.live[n.Name] = m
	c.mu.Unlock()
	c.signal()
}

func (e *events) NotifyLeave(n *memberlist.Node) {
	c := (*Cluster)(e)
	m, md := c.toMemberMeta(n)
	m.State = StateDead
	if md.leaving {
		m.State = StateLeft
	}
	if n.Name == c.cfg.Name {
		c.selfLeave.left.Store(true)
	}
	if m.State == StateLeft {
		c.reach.Lock()
		c.reach.book.left(n.Name) // a graceful leave shrinks what this node knows at once
		c.reach.Unlock()
	}
	c.mu.Lock()
	if len(c.mu.departed) >= maxDeparted {
		var oldest string
		var at time.Time
		for name, d := range c.mu.departed {
			if oldest == "" || d.at.Before(at) {
				oldest, at = name, d.at
			}
		}
		delete(c.mu.departed, oldest)
	}
	c.mu.departed[n.Name] = departure{m: m, at: time.Now()}
	delete(c.mu.live, n.Name)
	c.mu.Unlock()
	c.signal()
}

func (e *events) NotifyUpdate(n *memberlist.Node) {
	c := (*Cluster)(e)
	m, md := c.toMemberMeta(n)
	if n.Name == c.cfg.Name && md.leaving {
		c.selfLeave.flagged.Store(true)
	}
	c.mu.Lock()
	if _, ok := c.mu.live[n.Name]; ok {
		c.mu.live[n.Name] = m
	}
	c.mu.Unlock()
	c.signal()
}
