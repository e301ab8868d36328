package node

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	"github.com/sluicehq/sluice/lease"
	"github.com/sluicehq/sluice/node/member"
	"github.com/sluicehq/sluice/node/rules"
)

// fakeUpstream is a hand-written Upstream (the seam a Node has with
// node/upstream): fixed state, and a real Manager for its keys.
type fakeUpstream struct {
	mgr  *lease.Manager
	err  error
	rtt  time.Duration
	lent map[string]int64
}

func (f *fakeUpstream) Manager() *lease.Manager     { return f.mgr }
func (f *fakeUpstream) Demand(string)               {}
func (f *fakeUpstream) State() (bool, error)        { return f.err == nil, f.err }
func (f *fakeUpstream) CheckRules(*rules.Set) error { return nil }
func (f *fakeUpstream) WriteMetrics(io.Writer)      {}
func (f *fakeUpstream) URLs() []string              { return []string{"http://global-1:9090"} }
func (f *fakeUpstream) RTT() time.Duration          { return f.rtt }
func (f *fakeUpstream) Lent() map[string]int64      { return maps.Clone(f.lent) }

// /v1/stats shows the global tier's state: this node's (URLs,
// reachability and its error, round trip, keys and tokens lent by
// rule) and, in a cluster, the nodes' merged: reachable only if every
// node is, the first error naming its node, the longest round trip,
// keys and tokens summed.
func TestStatsUpstream(t *testing.T) {
	clock := testClock()
	store := lease.NewMemoryStore(lease.MemoryStoreConfig{Now: clock.Now})
	t.Cleanup(func() { store.Close() })
	mcfg := lease.DefaultConfig()
	mcfg.Now = clock.Now
	gmgr := lease.NewManager(lease.NewMemoryStore(lease.MemoryStoreConfig{Now: clock.Now}), mcfg)
	t.Cleanup(func() { gmgr.Close() })
	if _, err := gmgr.Take("g:k", lease.Policy{Algorithm: lease.TokenBucket, Limit: 100, Period: time.Hour}, 1); err != nil {
		t.Fatal(err)
	}
	// The Upstream's own table of loans says a stale 25 of "tenant" (a
	// key its Manager dropped with nothing to give back, so no return
	// told it): /v1/stats reads what the Manager holds, 13 of "g" on 1
	// key (a first lease: an eighth of 100), so that its keys and tokens
	// agree.
	up := &fakeUpstream{mgr: gmgr, rtt: 80500 * time.Microsecond, lent: map[string]int64{"g": 7, "tenant": 25},
		err: errors.New("the upstream cannot be reached: http://global-1:9090: dial tcp: refused")}
	cfg := DefaultConfig()
	cfg.Upstream = up
	tn := newTestNodeConfig(t, statsRules, store, clock, cfg)
	tn.n.adminToken = tokenDigest("tok")
	auth := "Authorization: Bearer tok"

	r := tn.do("GET", "/v1/stats?scope=node", "", auth)
	if r.status != 200 {
		t.Fatalf("GET /v1/stats: %d %s", r.status, r.body)
	}
	var b statsBody
	if err := json.Unmarshal([]byte(r.body), &b); err != nil {
		t.Fatal(err)
	}
	want := StatsUpstream{URLs: []string{"http://global-1:9090"}, Reachable: false, Error: up.err.Error(),
		RTTMS: 80.5, Keys: 1, Lent: map[string]int64{"g": 13}}
	same := func(got *StatsUpstream, want StatsUpstream) bool {
		return got != nil && got.Reachable == want.Reachable && got.Error == want.Error && got.RTTMS == want.RTTMS &&
			got.Keys == want.Keys && maps.Equal(got.Lent, want.Lent) && slices.Equal(got.URLs, want.URLs)
	}
	if !same(b.Upstream, want) || len(b.Nodes) != 1 || !same(b.Nodes[0].Upstream, want) {
		t.Fatalf("upstream %+v, node %+v; want %+v in both", b.Upstream, b.Nodes, want)
	}

	// Merged with a peer that reaches the global tier, slower, holding
	// more keys.
	peer := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, `{"self":"b","bucket_ms":%d,"store":{"breaker":"closed"},
			"upstream":{"urls":["http://global-1:9090","http://global-2:9090"],"reachable":true,"rtt_ms":90,"keys":2,"lent":{"g":5,"h":1}}}`,
			StatsBucket.Milliseconds())
	}))
	t.Cleanup(peer.Close)
	body := tn.n.stat.local()
	tn.n.stat.merge(t.Context(), &body, []member.Member{{Name: "b", HTTPAddr: peer.Listener.Addr().String()}}, nil)
	want = StatsUpstream{URLs: []string{"http://global-1:9090", "http://global-2:9090"}, Reachable: false,
		Error: body.Self + ": " + up.err.Error(), RTTMS: 90, Keys: 3, Lent: map[string]int64{"g": 18, "h": 1}}
	if !same(body.Upstream, want) {
		t.Fatalf("merged upstream %+v, want %+v", body.Upstream, want)
	}
	if len(body.Nodes) != 2 || body.Nodes[1].Upstream == nil || !body.Nodes[1].Upstream.Reachable || body.Nodes[1].Upstream.RTTMS != 90 ||
		body.Nodes[0].Upstream.Error != up.err.Error() || body.Nodes[0].Upstream.Lent["g"] != 13 {
		t.Fatalf("nodes %+v, want each node's own upstream state", body.Nodes)
	}

	// Reached again by both: the merged state is reachable, no error.
	up.err = nil
	body = tn.n.stat.local()
	tn.n.stat.merge(t.Context(), &body, []member.Member{{Name: "b", HTTPAddr: peer.Listener.Addr().String()}}, nil)
	if !body.Upstream.Reachable || body.Upstream.Error != "" {
		t.Fatalf("merged upstream %+v, want reachable without an error", body.Upstream)
	}

	// Without an upstream, no upstream object.
	plain := newTestNode(t, statsRules)
	plain.n.adminToken = tokenDigest("tok")
	if r := plain.do("GET", "/v1/stats", "", auth); r.status != 200 || r.json(t)["upstream"] != nil {
		t.Fatalf("no upstream: %d %s, want no upstream object", r.status, r.body)
	}
}
