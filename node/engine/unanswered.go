package engine

import (
	"context"
	"log/slog"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/sluicehq/sluice/lease"
)

// When an owner does not answer.
//
// An owner that does not answer in time (its forward timed out, it
// answered 503 or 429, its peer is backing off after such a failure, or
// it is demoted: demote.go) is, for the checks waiting on it, a Store that
// does not answer. No check is shed: a local rule is never answered 5xx
// because an owner failed, whatever failed.
//
//   - On a shared Store (Redis, ClusterConfig.Shares nil) the check is
//     decided here at once, by leasing from the Store: every decider
//     takes its tokens from the one bucket the Store keeps, so the
//     accuracy contract holds whoever decides (the silent owner's tokens
//     stay counted as lent; what it decided for a reply that came late is
//     refunded to it by the Forwarder). With the Store down or slow too,
//     a local rule's check is denied (429): see decideShared.
//   - On each node's own memory store there is no shared bucket, and two
//     deciders of a key each admit from their own count: the rule's
//     on_store_failure applies. local: decided here from this node's
//     memory, held to its share of the limit (limit ÷ the members it last
//     knew, at least 1; the share of a token_bucket's burst too), so the
//     owner and each node that cannot reach it admit at most the limit
//     and a share each; open: allowed, degraded; closed: denied (429),
//     retry after the Forwarder's back-off. Exact algorithms (sliding_log)
//     are decided from this node's memory.
//
// The minority: a node that sees fewer than a majority of the members it
// last knew (ClusterConfig.Quorum) holds every check it decides to its
// share on the memory store too, its own keys included, until it sees a
// majority again; so a split brain admits per key at most the majority's
// limit and the minority's share (docs/faults.md has the arithmetic). On
// Redis a minority decides as ever: the Store keeps the contract.

// shares holds a node's checks to its share of each limit (see above).
type shares struct {
	store *lease.MemoryStore
	// quorum reports whether this node is in the minority and how many
	// members it last knew (≥ 1).
	quorum func() (minority bool, known int)
}

// sharePolicy is p cut to 1/known of its limit and burst (at least 1).
func sharePolicy(p lease.Policy, known int) lease.Policy {
	k := int64(max(known, 1))
	p.Limit = max(p.Limit/k, 1)
	if p.Burst > 0 {
		p.Burst = max(p.Burst/k, 1)
	}
	return p
}

// capping reports whether this node's own decisions are held to their
// share now (the minority on the memory store), and its known members.
func (c *cluster) capping() (bool, int) {
	if c == nil || c.shares == nil || c.shares.quorum == nil {
		return false, 1
	}
	return c.shares.quorum()
}

// unanswered decides item i of b, whose owner did not answer (see above).
func (e *Engine) unanswered(b *Batch, i int32, peer string) {
	it := &b.Items[i]
	if b.Requests[it.req].Err != nil {
		return
	}
	c := e.cl
	c.met.unanswered.Inc()
	c.flog.note(peer)
	if c.shares == nil {
		e.decideShared(b, i)
		return
	}
	switch it.Policy.OnFailure {
	case lease.FailOpen:
		it.Decision = lease.Decision{Allowed: true, Limit: it.Policy.Limit, Degraded: true}
		b.record(it)
	case lease.FailClosed:
		it.Decision = lease.Decision{Limit: it.Policy.Limit, RetryAfter: c.shedRetry}
		b.record(it)
		b.noteDenied(it)
	default:
		e.decideLocal(b, i)
		if it.Decided {
			_, known := c.capping()
			e.capShare(b, it, known)
			if it.Decision.Allowed {
				it.Decision.Degraded = true // decided without its owner
				it.charged = false
			}
		}
	}
}

// decideShared decides item i, whose owner did not answer, by leasing from
// the shared Store. When the Store does not answer in time either, the
// Manager's local mode would admit from this node's memory while the owner
// admits from its loan, two counts the Store never sees together: a local
// rule's check is denied instead (429, retry after the back-off), so the
// limit holds; an open one is allowed (degraded), a closed one answered
// as the Manager says.
func (e *Engine) decideShared(b *Batch, i int32) {
	it := &b.Items[i]
	q := &b.Requests[it.req]
	if it.ri.demand != nil {
		it.ri.demand(it.ckey)
	}
	d, err := it.ri.mgr.Take(it.ckey, it.Policy, it.Hits)
	if err != nil {
		q.Err, q.ErrItem = err, int(i)
		return
	}
	if d.Allowed && d.Degraded && it.Policy.OnFailure == lease.FailLocal && it.Hits > 0 {
		d = lease.Decision{Limit: it.Policy.Limit, Remaining: d.Remaining, Reset: d.Reset, RetryAfter: e.cl.shedRetry}
	}
	it.Decision = d
	b.record(it)
	b.noteDenied(it)
}

// capLocals holds the items b.local, just decided here, to their share
// when this node is the minority on the memory store.
func (e *Engine) capLocals(b *Batch) {
	minority, known := e.cl.capping()
	if !minority {
		return
	}
	for _, i := range b.local {
		if it := &b.Items[i]; it.Decided && b.Requests[it.req].Err == nil {
			e.capShare(b, it, known)
		}
	}
}

// capShare takes an allowed leased item's hits from its share too; when
// the share cannot cover them, the item is denied and what it charged
// here is given back.
func (e *Engine) capShare(b *Batch, it *Item, known int) {
	if !it.Decision.Allowed || it.Hits == 0 || !it.Policy.Algorithm.Leased() {
		return
	}
	p := sharePolicy(it.Policy, known)
	key := it.ckey + "\x00share/" + strconv.Itoa(known) // a new count when the share changes
	g, err := e.cl.shares.store.Lease(context.Background(), key, p, it.Hits, it.Hits, lease.Lessee{})
	if err != nil || g.Granted >= it.Hits {
		return
	}
	if it.charged {
		it.ri.mgr.Refund(it.ckey, it.Policy, it.Hits)
		it.charged = false
	}
	it.Decision = lease.Decision{Limit: it.Policy.Limit, Remaining: g.Remaining, Reset: g.Reset,
		RetryAfter: max(g.Wait, time.Millisecond), Degraded: true}
	e.cl.met.capped.Inc()
	b.noteDenied(it)
}

// fallbackLog says, at a bounded rate, that checks were decided here
// because their owners did not answer: a line when it starts (after a
// quiet interval), a count each interval while it goes on, and a line
// when an interval passes without any.
type fallbackLog struct {
	log   *slog.Logger
	every time.Duration
	after func(d time.Duration, f func()) func() bool

	mu     sync.Mutex
	active bool
	n      int64
	total  int64
	peers  map[string]int64
	since  time.Time
	now    func() time.Time
}

// note counts one check decided for peer.
func (l *fallbackLog) note(peer string) {
	if l == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.n++
	l.total++
	l.peers[peer]++
	if l.active {
		return
	}
	l.active, l.since = true, l.now()
	l.log.Warn("an owner does not answer: deciding its checks here", "peer", peer)
	l.after(l.every, l.flush)
}

// flush logs what the last interval counted, or the end.
func (l *fallbackLog) flush() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.n == 0 {
		l.log.Info("owners answer again: no check decided for a silent owner in the last interval",
			"decided_here", l.total, "for", l.now().Sub(l.since).Round(time.Millisecond).String())
		l.active, l.total = false, 0
		return
	}
	peers := make([]string, 0, len(l.peers))
	for p := range l.peers {
		peers = append(peers, p)
	}
	sort.Strings(peers)
	attrs := []any{"checks", l.n, "interval", l.every.String()}
	for _, p := range peers {
		attrs = append(attrs, "peer."+p, l.peers[p])
	}
	l.log.Warn("owners do not answer: checks decided here", attrs...)
	l.n = 0
	clear(l.peers)
	l.after(l.every, l.flush)
}
