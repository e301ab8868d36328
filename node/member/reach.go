package member

import (
	"net"
	"slices"
	"strings"
	"sync"
	"time"
)

// Reach: memberlist tells only who is alive, and takes seconds to call a
// member dead (and never tells of a link that drops one way: its indirect
// probes go around it). So the Cluster pings every live member itself, and
// every member that failed without leaving, each Config.ReachInterval
// (memberlist's own UDP ping, on the encrypted gossip transport, one at a
// time per member, each waiting up to memberlist's ProbeTimeout), and
// calls a member answering once it acked one, until Config.ReachMisses
// pings in a row went unanswered. Counting misses rather than the time
// since the last ack keeps a node that was itself stalled (a GC pause, a
// starved CPU) from calling everyone silent when it wakes: it missed at
// most the one ping it had out.
//
// The members it last knew: every member it saw alive and answering
// within Config.KnownWindow, and itself. A member that leaves gracefully
// (Leave) is forgotten at once; one that fails is kept for KnownWindow
// after it was last seen, so a partition keeps counting it. With
// Config.ClusterSize set, that number is what the node last knew, whatever
// it saw.
//
// It sees itself and the live members that answer. It is the minority
// when it sees fewer than a majority (known/2 + 1) of the members it last
// knew: a single node started alone is never one. A member that failed
// and answers a ping again is joined at once, so a healed partition
// merges within a ping, not at the next reconnect.

// Quorum is what this node sees of the members it last knew.
type Quorum struct {
	// Seen counts this node and the live members that answer its pings.
	Seen int `json:"seen"`
	// Known counts the members it last knew (see the package doc).
	Known int `json:"known"`
	// Missing names the members it last knew that it does not see, sorted.
	Missing []string `json:"missing,omitempty"`
	// Minority: Seen < Known/2 + 1.
	Minority bool `json:"minority"`
}

// reachBook is the members' reach as this node sees it. It is pure (the
// time is passed in) and not safe for concurrent use: Cluster.reach's
// mutex guards it.
type reachBook struct {
	self   string
	misses int                  // pings in a row unanswered that make a member silent; < 0: never
	keep   time.Duration        // a member seen within it is known
	size   int                  // Config.ClusterSize; 0: the members seen
	missed map[string]int       // pings in a row unanswered, by member that acked once
	known  map[string]time.Time // when last seen alive and answering
}

func newReachBook(self string, misses int, keep time.Duration, size int) *reachBook {
	return &reachBook{self: self, misses: misses, keep: keep, size: size,
		missed: map[string]int{}, known: map[string]time.Time{}}
}

// ack records that name answered a ping.
func (r *reachBook) ack(name string) { r.missed[name] = 0 }

// miss records that a ping to name went unanswered.
func (r *reachBook) miss(name string) {
	if n, ok := r.missed[name]; ok {
		r.missed[name] = n + 1
	}
}

// answering reports whether name acked a ping and has not missed the
// last ReachMisses since.
func (r *reachBook) answering(name string, _ time.Time) bool {
	if name == r.self || r.misses < 0 {
		return true
	}
	n, ok := r.missed[name]
	return ok && n < r.misses
}

// left forgets a member that left gracefully.
func (r *reachBook) left(name string) {
	delete(r.known, name)
	delete(r.missed, name)
}

// quorum is the Quorum with the live members live (this node among them
// or not) at now; it records the members seen.
func (r *reachBook) quorum(live []string, now time.Time) Quorum {
	seen := map[string]bool{r.self: true}
	for _, n := range live {
		if n != r.self && r.answering(n, now) {
			seen[n] = true
			r.known[n] = now
		}
	}
	var missing []string
	for n, at := range r.known {
		switch {
		case seen[n]:
		case now.Sub(at) > r.keep:
			delete(r.known, n)
			delete(r.missed, n)
		default:
			missing = append(missing, n)
		}
	}
	slices.Sort(missing)
	q := Quorum{Seen: len(seen), Known: len(seen) + len(missing), Missing: missing}
	if r.size > 0 {
		q.Known = max(r.size, q.Seen)
	}
	q.Minority = q.Seen < q.Known/2+1
	return q
}

// reach is the Cluster's reach state and the lines it logs.
type reach struct {
	sync.Mutex
	book     *reachBook
	inflight map[string]bool      // a ping out to the member
	joined   map[string]time.Time // when a failed member was last rejoined
	silent   map[string]time.Time // live members not answering, since
	cur      bool                 // in the minority at the last tick
	since    time.Time            // when it last entered the minority
	lasted   time.Duration        // how long its last minority lasted
	logged   time.Time            // when a line about the minority was last logged
	flaps    int                  // changes not logged yet
}

// rejoinEvery bounds how often a failed member that answers pings is
// joined again.
const rejoinEvery = time.Second

// reachLogEvery bounds the lines about the minority (one per change, at
// most one per interval, the changes between counted).
const reachLogEvery = 5 * time.Second

// Quorum returns what this node sees of the members it last knew.
func (c *Cluster) Quorum() Quorum {
	now := c.cfg.Now()
	live := c.liveNames()
	c.reach.Lock()
	defer c.reach.Unlock()
	return c.reach.book.quorum(live, now)
}

// Answering reports whether the member name answers this node's pings
// (always true of this node).
func (c *Cluster) Answering(name string) bool {
	now := c.cfg.Now()
	c.reach.Lock()
	defer c.reach.Unlock()
	return c.reach.book.answering(name, now)
}

func (c *Cluster) liveNames() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]string, 0, len(c.mu.live))
	for n := range c.mu.live {
		out = append(out, n)
	}
	return out
}

// runReach pings the members every ReachInterval and logs what changed.
func (c *Cluster) runReach() {
	defer c.wg.Done()
	c.every(c.cfg.ReachInterval, func() {
		c.pingAll()
		c.logReach(c.cfg.Now())
	})
}

// every calls f every d until Close; never when d < 0.
func (c *Cluster) every(d time.Duration, f func()) {
	if d < 0 {
		return
	}
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		select {
		case <-c.stop:
			return
		case <-t.C:
		}
		f()
	}
}

// pingAll pings, each from its own goroutine, every live member and every
// member that failed within KnownWindow, but those with a ping out.
func (c *Cluster) pingAll() {
	type target struct {
		name, addr string
		dead       bool
	}
	var ts []target
	now := c.cfg.Now()
	c.mu.Lock()
	for n, m := range c.mu.live {
		ts = append(ts, target{n, m.GossipAddr, false})
	}
	for n, d := range c.mu.departed {
		if d.m.State == StateDead && now.Sub(d.at) <= c.cfg.KnownWindow {
			ts = append(ts, target{n, d.m.GossipAddr, true})
		}
	}
	c.mu.Unlock()
	for _, tg := range ts {
		if tg.name == c.cfg.Name || tg.addr == "" {
			continue
		}
		c.reach.Lock()
		busy := c.reach.inflight[tg.name]
		c.reach.inflight[tg.name] = true
		c.reach.Unlock()
		if busy {
			continue
		}
		c.wg.Add(1)
		go func() {
			defer c.wg.Done()
			defer func() {
				c.reach.Lock()
				delete(c.reach.inflight, tg.name)
				c.reach.Unlock()
			}()
			addr, err := net.ResolveUDPAddr("udp", tg.addr)
			if err != nil || c.closed() {
				return
			}
			if _, err := c.ml.Ping(tg.name, addr); err != nil {
				if !c.closed() {
					c.reach.Lock()
					c.reach.book.miss(tg.name)
					c.reach.Unlock()
				}
				return
			}
			now := c.cfg.Now()
			c.reach.Lock()
			c.reach.book.ack(tg.name)
			rejoin := tg.dead && now.Sub(c.reach.joined[tg.name]) >= rejoinEvery
			if rejoin {
				c.reach.joined[tg.name] = now
			}
			c.reach.Unlock()
			if rejoin && !c.leaving.Load() && !c.closed() {
				// A failed member answers again: the partition healed.
				if n, _ := c.ml.Join([]string{tg.addr}); n > 0 {
					c.log.Info("rejoined a member that answers again", "member", tg.name)
				}
			}
		}()
	}
}

// logReach logs the live members that stop or start answering and this
// node entering or leaving the minority (at most one line a reachLogEvery
// about the minority, counting the changes between).
func (c *Cluster) logReach(now time.Time) {
	live := c.liveNames()
	c.reach.Lock()
	defer c.reach.Unlock()
	r := &c.reach
	q := r.book.quorum(live, now)
	for _, n := range live {
		if n == c.cfg.Name {
			continue
		}
		since, was := r.silent[n]
		_, known := r.book.known[n] // it answered once: a member that never did is still joining
		switch ans := r.book.answering(n, now); {
		case !ans && !was && known:
			r.silent[n] = now
			c.log.Warn("member not answering pings (alive to gossip: a one-way or partial cut, or a stalled process)", "member", n)
		case ans && was:
			delete(r.silent, n)
			c.log.Info("member answers pings again", "member", n, "silent_for", now.Sub(since).Round(time.Millisecond).String())
		}
	}
	for n := range r.silent {
		if !slices.Contains(live, n) {
			delete(r.silent, n) // dead now: memberlist says so
		}
	}
	if q.Minority != r.cur {
		r.flaps++
		r.cur = q.Minority
		if q.Minority {
			r.since = now
		} else {
			r.lasted = now.Sub(r.since)
		}
	}
	if r.flaps == 0 || now.Sub(r.logged) < reachLogEvery {
		return
	}
	attrs := []any{"seen", q.Seen, "known", q.Known, "missing", strings.Join(q.Missing, ",")}
	if r.flaps > 1 {
		attrs = append(attrs, "changes", r.flaps)
	}
	if q.Minority {
		c.log.Warn("this node sees a minority of the members it last knew: not ready; on the memory store each limit is cut to its share", attrs...)
	} else {
		attrs = append(attrs, "minority_for", r.lasted.Round(time.Millisecond).String())
		c.log.Info("this node sees a majority of the members again", attrs...)
	}
	r.logged, r.flaps = now, 0
}
