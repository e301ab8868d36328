package node

import (
	"errors"
	"strings"
	"sync"

	"github.com/valyala/fasthttp"

	"github.com/sluicehq/sluice/node/api"
	"github.com/sluicehq/sluice/node/hot"
	"github.com/sluicehq/sluice/shard"
)

// Hot keys (cluster only). A clustered node runs a [hot.Hot]: every check
// it serves for a key it owns or holds is observed (sampled in the
// sketch); as owner it splits keys that pass their rule's hot.threshold
// over several holders and announces the plan by gossip
// ([Node.GossipMessage]) and in its forwarding replies (DecideBatch adds
// the plans of the batch's keys; the sender's Forwarder hands them to
// ApplyPlans). Routing asks the split table before the ring: a holder
// serves a split key itself, any other node sends it to a random holder.
// A holder that stops holding a key it does not own returns the key's
// leased tokens from the handoff goroutine. With ClusterConfig.HotNoSplit
// the node detects and shows hot keys but never splits them nor routes by
// others' splits: its Hot sees a ring of this node alone, on which no key
// can split.

// errNoAnnouncer means the node has no membership yet to gossip with.
var errNoAnnouncer = errors.New("no membership to gossip with yet")

// announcer is the Hot's Announcer: the membership given to SetMembership
// once it can Broadcast (a *member.Cluster), which happens after the Hot
// is built.
type announcer struct{ c *cluster }

func (a announcer) Broadcast(msg []byte) error {
	b := a.c.membership.Load()
	if b == nil {
		return errNoAnnouncer
	}
	ba, ok := b.m.(hot.Announcer)
	if !ok {
		return errNoAnnouncer
	}
	return ba.Broadcast(msg)
}

// hotState is the cluster's hot-key state.
type hotState struct {
	h     *hot.Hot
	split bool // false: detect and show only (ClusterConfig.HotNoSplit)

	// ended holds the keys this node stopped holding whose tokens the
	// handoff goroutine returns.
	mu    sync.Mutex
	ended map[string]bool
}

// newHot builds the hot-key state of c from cfg.
func (c *cluster) newHot(cfg ClusterConfig) error {
	hcfg := hot.DefaultConfig()
	if cfg.Hot != nil {
		hcfg = *cfg.Hot
	}
	hcfg.Self = cfg.Self
	if hcfg.Logger == nil {
		hcfg.Logger = c.n.log
	}
	if hcfg.Metrics == nil {
		hcfg.Metrics = c.n.met.set // /metrics writes it
	}
	if hcfg.Threshold == nil {
		hcfg.Threshold = c.n.hotThreshold
	}
	h, err := hot.New(hcfg, announcer{c})
	if err != nil {
		return err
	}
	c.hot = &hotState{h: h, split: !cfg.HotNoSplit, ended: map[string]bool{}}
	h.SetRing(shard.NewRing([]string{cfg.Self}, cfg.Vnodes))
	h.OnEnd(c.hotEnded)
	return nil
}

// hotThreshold is hot.Config.Threshold: the hot settings of the rule of a
// counter key ("rule:key"; rule names hold no ':').
func (n *Node) hotThreshold(counterKey string) (float64, int, bool) {
	name, _, ok := strings.Cut(counterKey, ":")
	if !ok {
		return 0, 0, false
	}
	t := n.eng.Table()
	if t == nil {
		return 0, 0, false
	}
	ri := t.Get(name)
	if ri == nil {
		return 0, 0, false
	}
	r := ri.Rule()
	return r.Hot.Threshold, r.Hot.Split, true
}

// hotEnded is the Hot's OnEnd hook: it must not block, so the key's
// tokens are returned by the handoff goroutine.
func (c *cluster) hotEnded(counterKey string) {
	hs := c.hot
	hs.mu.Lock()
	hs.ended[counterKey] = true
	hs.mu.Unlock()
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

// takeEnded returns and clears the keys this node stopped holding.
func (hs *hotState) takeEnded() map[string]bool {
	hs.mu.Lock()
	defer hs.mu.Unlock()
	if len(hs.ended) == 0 {
		return nil
	}
	e := hs.ended
	hs.ended = map[string]bool{}
	return e
}

// holds reports whether this node holds counterKey as a split holder.
func (hs *hotState) holds(counterKey, self string) bool {
	p, ok := hs.h.Lookup(counterKey)
	return ok && p.Has(self)
}

// GossipMessage is member.Config.OnMessage for a clustered node: it applies
// the hot-key plans other members broadcast, and hands rules-version
// announcements to the rule source (rulesource.go). Other messages are
// ignored; so are plans on a single node or with HotNoSplit.
func (n *Node) GossipMessage(msg []byte) {
	if isRulesMsg(msg) { // a new rules version (rulesource.go)
		n.rulesMessage(msg)
		return
	}
	if c := n.cl; c != nil && c.hot.split && hot.IsPlans(msg) {
		c.hot.h.Receive(msg)
	}
}

// Hot returns the node's hot-key machinery (for tests and tools); nil on a
// single node.
func (n *Node) Hot() *hot.Hot {
	if c := n.cl; c != nil {
		return c.hot.h
	}
	return nil
}

// hotkeys answers GET /v1/hotkeys: this node's top keys with their rates
// and split state, and the cluster's splits as this node knows them
// (hot.Hot.AppendJSON). A single node tracks no keys: it answers an empty
// list.
func (n *Node) hotkeys(ctx *fasthttp.RequestCtx) {
	ctx.SetContentTypeBytes(contentTypeJSON)
	c := n.cl
	if c == nil {
		name := n.cfg.Name
		if name == "" {
			name = singleName
		}
		buf := api.AppendString([]byte(`{"self":`), name)
		ctx.SetBody(append(buf, `,"node_rate":0.0,"top":[],"splits":[]}`...))
		return
	}
	ctx.SetBody(c.hot.h.AppendJSON(nil))
}
