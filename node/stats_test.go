package node

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/sluicehq/sluice/lease"
	"github.com/sluicehq/sluice/node/engine"
	"github.com/sluicehq/sluice/node/forward"
	"github.com/sluicehq/sluice/node/member"
)

// t0 is the start of a bucket (a multiple of StatsBucket since the epoch).
var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func cnt(allowed, denied, degraded uint64) counts {
	var c counts
	c[decAllowed], c[decDenied], c[decDegraded] = allowed, denied, degraded
	return c
}

func rowOf(t *testing.T, rows []statsRule, name string) statsRule {
	t.Helper()
	for _, r := range rows {
		if r.Rule == name {
			return r
		}
	}
	t.Fatalf("no row %q in %+v", name, rows)
	return statsRule{}
}

func TestStatsRing(t *testing.T) {
	const n = 6
	w := 10 * time.Second
	t.Run("counts go to the bucket of the sample", func(t *testing.T) {
		r := newStatsRing(w, n)
		r.observe(t0.Add(1*time.Second), "a", cnt(5, 1, 0))
		r.observe(t0.Add(9*time.Second), "a", cnt(7, 1, 0)) // +2 allowed, same bucket
		r.observe(t0.Add(12*time.Second), "a", cnt(10, 4, 2))
		start, rows := r.snapshot(t0.Add(15*time.Second), []string{"a"})
		if want := t0.Add(-4 * w); !start.Equal(want) {
			t.Fatalf("start %v, want %v (oldest of %d buckets ending with now's)", start, want, n)
		}
		a := rowOf(t, rows, "a")
		if want := []uint64{0, 0, 0, 0, 7, 3}; !slices.Equal(a.Allowed, want) {
			t.Errorf("allowed %v, want %v", a.Allowed, want)
		}
		if want := []uint64{0, 0, 0, 0, 1, 3}; !slices.Equal(a.Denied, want) {
			t.Errorf("denied %v, want %v", a.Denied, want)
		}
		if want := []uint64{0, 0, 0, 0, 0, 2}; !slices.Equal(a.Degraded, want) {
			t.Errorf("degraded %v, want %v", a.Degraded, want)
		}
	})
	t.Run("old buckets leave the window", func(t *testing.T) {
		r := newStatsRing(w, n)
		r.observe(t0, "a", cnt(1, 0, 0))
		r.observe(t0.Add(3*w), "a", cnt(3, 0, 0))
		_, rows := r.snapshot(t0.Add(5*w), nil) // window t0 .. t0+5w: all in
		if got, want := rowOf(t, rows, "a").Allowed, []uint64{1, 0, 0, 2, 0, 0}; !slices.Equal(got, want) {
			t.Errorf("allowed %v, want %v", got, want)
		}
		_, rows = r.snapshot(t0.Add(6*w), nil) // t0's bucket is out
		if got, want := rowOf(t, rows, "a").Allowed, []uint64{0, 0, 2, 0, 0, 0}; !slices.Equal(got, want) {
			t.Errorf("allowed %v, want %v", got, want)
		}
		// A sample far later reuses t0's slot: what it held is gone.
		r.observe(t0.Add(12*w), "a", cnt(4, 0, 0))
		_, rows = r.snapshot(t0.Add(12*w), nil)
		if got, want := rowOf(t, rows, "a").Allowed, []uint64{0, 0, 0, 0, 0, 1}; !slices.Equal(got, want) {
			t.Errorf("after a long gap: allowed %v, want %v", got, want)
		}
	})
	t.Run("rules without counts and deleted rules", func(t *testing.T) {
		r := newStatsRing(w, n)
		r.observe(t0, "gone", cnt(2, 0, 0))
		r.observe(t0, "quiet", cnt(0, 0, 0))
		_, rows := r.snapshot(t0.Add(w), []string{"quiet", "new"})
		var names []string
		for _, row := range rows {
			names = append(names, row.Rule)
			if len(row.Allowed) != n || len(row.ShadowDenied) != n || len(row.Unavailable) != n {
				t.Errorf("row %q has %d buckets, want %d", row.Rule, len(row.Allowed), n)
			}
		}
		if want := []string{"gone", "new", "quiet"}; !slices.Equal(names, want) {
			t.Errorf("rows %v, want %v (current rules plus rules with counts, by name)", names, want)
		}
	})
	t.Run("a counter that goes back counts from zero", func(t *testing.T) {
		r := newStatsRing(w, n)
		r.observe(t0, "a", cnt(10, 0, 0))
		r.observe(t0.Add(w), "a", cnt(3, 0, 0))
		_, rows := r.snapshot(t0.Add(w), nil)
		if got, want := rowOf(t, rows, "a").Allowed[n-2:], []uint64{10, 3}; !slices.Equal(got, want) {
			t.Errorf("allowed %v, want %v", got, want)
		}
	})
	t.Run("a sample older than the newest bucket in its slot is dropped", func(t *testing.T) {
		r := newStatsRing(w, n)
		r.observe(t0.Add(n*w), "a", cnt(1, 0, 0))
		r.observe(t0, "a", cnt(2, 0, 0)) // same slot, older bucket
		_, rows := r.snapshot(t0.Add(n*w), nil)
		if got := rowOf(t, rows, "a").Allowed; got[n-1] != 1 {
			t.Errorf("allowed %v: the newer bucket was overwritten", got)
		}
	})
}

const statsRules = `rules:
  - name: five
    algorithm: fixed_window
    limit: 5
    period: 1h
  - name: other
    algorithm: token_bucket
    limit: 100
    period: 1s
`

func TestStatsEndpoint(t *testing.T) {
	tn := newTestNode(t, statsRules)
	tn.n.adminToken = tokenDigest("tok") // before the first request
	tn.n.stat.setClock(tn.clock.Now)
	auth := "Authorization: Bearer tok"

	if r := tn.do("GET", "/v1/stats", ""); r.status != 401 || !strings.HasPrefix(r.hdr["Www-Authenticate"], "Bearer") {
		t.Errorf("no token: %d %v %s, want 401 with WWW-Authenticate", r.status, r.hdr, r.body)
	}
	if r := tn.do("GET", "/v1/stats", "", "Authorization: Bearer nope"); r.status != 403 {
		t.Errorf("wrong token: %d %s, want 403", r.status, r.body)
	}
	if r := tn.do("POST", "/v1/stats", "", auth); r.status != 405 {
		t.Errorf("POST: %d, want 405", r.status)
	}
	if r := tn.do("GET", "/v1/stats?scope=everything", "", auth); r.status != 400 || r.json(t)["field"] != "scope" {
		t.Errorf("bad scope: %d %s, want 400 naming scope", r.status, r.body)
	}

	get := func() statsBody {
		t.Helper()
		r := tn.do("GET", "/v1/stats", "", auth)
		if r.status != 200 {
			t.Fatalf("GET /v1/stats: %d %s", r.status, r.body)
		}
		var b statsBody
		if err := json.Unmarshal([]byte(r.body), &b); err != nil {
			t.Fatal(err)
		}
		return b
	}
	check := func(n int) {
		t.Helper()
		for range n {
			tn.do("GET", "/v1/check?rule=five&key=k", "")
		}
	}

	check(7) // 5 allowed, 2 denied
	b := get()
	if b.BucketMS != StatsBucket.Milliseconds() || len(b.Rules) != 2 {
		t.Fatalf("body %+v: want bucket_ms %d and the two rules", b, StatsBucket.Milliseconds())
	}
	if want := tn.clock.Now().Truncate(StatsBucket).Add(-(StatsBuckets - 1) * StatsBucket).UnixMilli(); b.StartMS != want {
		t.Errorf("start_ms %d, want %d", b.StartMS, want)
	}
	five := rowOf(t, b.Rules, "five")
	if len(five.Allowed) != StatsBuckets {
		t.Fatalf("%d buckets, want %d", len(five.Allowed), StatsBuckets)
	}
	last := StatsBuckets - 1
	if five.Allowed[last] != 5 || five.Denied[last] != 2 || sumOf(five.Allowed) != 5 || sumOf(five.Denied) != 2 {
		t.Errorf("five: allowed %v denied %v, want 5 and 2 in the last bucket", five.Allowed, five.Denied)
	}
	if o := rowOf(t, b.Rules, "other"); sumOf(o.Allowed)+sumOf(o.Denied) != 0 {
		t.Errorf("other: %+v, want no counts", o)
	}
	if b.Store == nil || b.Store.Breaker != "closed" || !b.Store.Healthy || b.Self != singleName {
		t.Errorf("store %+v self %q: want a closed breaker on node %q", b.Store, b.Self, singleName)
	}
	if len(b.Nodes) != 1 || !b.Nodes[0].OK || b.Partial {
		t.Errorf("nodes %+v partial %v: want this node alone", b.Nodes, b.Partial)
	}

	// Ten seconds later: new checks go to the new bucket, the old ones
	// moved one bucket back.
	tn.clock.Advance(StatsBucket)
	check(3) // the window is 1h: all denied
	b = get()
	five = rowOf(t, b.Rules, "five")
	if five.Allowed[last-1] != 5 || five.Denied[last-1] != 2 || five.Denied[last] != 3 || five.Allowed[last] != 0 {
		t.Errorf("after 10s: allowed %v denied %v", five.Allowed, five.Denied)
	}

	// Five minutes later the first checks are out of the window.
	tn.clock.Advance(StatsBuckets * StatsBucket)
	b = get()
	if five = rowOf(t, b.Rules, "five"); sumOf(five.Allowed)+sumOf(five.Denied) != 0 {
		t.Errorf("after 5 min: allowed %v denied %v, want nothing", five.Allowed, five.Denied)
	}
}

func sumOf(a []uint64) (s uint64) {
	for _, v := range a {
		s += v
	}
	return s
}

// TestStatsMerge sums a peer's buckets into this node's answer, aligned by
// time, and reports a peer that does not answer without failing.
func TestStatsMerge(t *testing.T) {
	a := newTestNode(t, statsRules)
	a.n.stat.setClock(a.clock.Now)
	b := newTestNode(t, statsRules+`  - name: only-b
    algorithm: token_bucket
    limit: 1
    period: 1h
`)
	b.n.stat.setClock(b.clock.Now)
	b.clock.Advance(StatsBucket) // b is one bucket ahead of a
	for range 3 {
		a.do("GET", "/v1/check?rule=five&key=k", "")
	}
	for range 2 {
		b.do("GET", "/v1/check?rule=five&key=k", "")
	}
	b.do("GET", "/v1/check?rule=only-b&key=k", "")

	// b answers over real loopback TCP, as a peer would.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = b.n.Serve(ln) }() // stopped by b's cleanup (Shutdown)
	dead, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	deadAddr := dead.Addr().String()
	dead.Close() // nothing listens there: refused

	body := a.n.stat.local()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	a.n.stat.merge(ctx, &body, []member.Member{
		{Name: "b", HTTPAddr: ln.Addr().String()},
		{Name: "c", HTTPAddr: deadAddr},
		{Name: "d"},
	}, nil)

	if !body.Partial || len(body.Nodes) != 4 {
		t.Fatalf("partial %v nodes %+v: want 4 nodes, two failed", body.Partial, body.Nodes)
	}
	for _, n := range body.Nodes {
		if want := n.Name == singleName || n.Name == "b"; n.OK != want {
			t.Errorf("node %+v: ok %v, want %v", n, n.OK, want)
		}
		if !n.OK && n.Error == "" {
			t.Errorf("node %q failed without an error", n.Name)
		}
	}
	last := StatsBuckets - 1
	five := rowOf(t, body.Rules, "five")
	// a's 3 are in its last bucket; b's 2 in b's last bucket, one bucket
	// after a's now: they count in a's current bucket.
	if five.Allowed[last] != 5 || sumOf(five.Allowed) != 5 {
		t.Errorf("five allowed %v: want a's 3 and b's 2 (b is ahead) in the last bucket", five.Allowed)
	}
	names := []string{}
	for _, r := range body.Rules {
		names = append(names, r.Rule)
	}
	if !slices.IsSorted(names) || !slices.Contains(names, "only-b") {
		t.Errorf("rules %v: want sorted, with b's only-b", names)
	}

	// Now a catches up with b: both buckets line up.
	a.clock.Advance(StatsBucket)
	body = a.n.stat.local()
	a.n.stat.merge(ctx, &body, []member.Member{{Name: "b", HTTPAddr: ln.Addr().String()}}, nil)
	five = rowOf(t, body.Rules, "five")
	if five.Allowed[last-1] != 3 || five.Allowed[last] != 2 {
		t.Errorf("five allowed %v: want a's 3 then b's 2", five.Allowed)
	}
	if ob := rowOf(t, body.Rules, "only-b"); ob.Allowed[last] != 1 {
		t.Errorf("only-b allowed %v, want 1 in the last bucket", ob.Allowed)
	}

	// b behind a by the whole window: nothing of b's is in a's window.
	a.clock.Advance(StatsBuckets * StatsBucket)
	body = a.n.stat.local()
	a.n.stat.merge(ctx, &body, []member.Member{{Name: "b", HTTPAddr: ln.Addr().String()}}, nil)
	if five = rowOf(t, body.Rules, "five"); sumOf(five.Allowed) != 0 {
		t.Errorf("five allowed %v: want none (b's buckets are before a's window)", five.Allowed)
	}
}

// TestStatsCluster: on a clustered node, GET /v1/stats sums the figures of
// every live member that answers (each counts the checks it answered),
// and lists a member that does not answer without failing.
func TestStatsCluster(t *testing.T) {
	store := lease.NewMemoryStore(lease.MemoryStoreConfig{})
	t.Cleanup(func() { store.Close() })
	nodes := newClusterNodes(t, store, map[string]string{"a": statsRules, "b": statsRules, "c": statsRules})
	for i := range 3 {
		nodes["a"].do(t, "GET", fmt.Sprintf("/v1/check?rule=other&key=a%d", i), "")
	}
	for i := range 2 {
		nodes["b"].do(t, "GET", fmt.Sprintf("/v1/check?rule=other&key=b%d", i), "")
	}
	nodes["c"].stop() // still a member, no longer answering HTTP

	r := nodes["a"].do(t, "GET", "/v1/stats", "") // loopback, no token configured
	if r.status != 200 {
		t.Fatalf("GET /v1/stats: %d %s", r.status, r.body)
	}
	var b statsBody
	if err := json.Unmarshal([]byte(r.body), &b); err != nil {
		t.Fatal(err)
	}
	if got := sumOf(rowOf(t, b.Rules, "other").Allowed); got != 5 {
		t.Errorf("other: %d allowed cluster-wide, want 5 (3 on a, 2 on b)", got)
	}
	ok := map[string]bool{}
	for _, n := range b.Nodes {
		ok[n.Name] = n.OK
	}
	if want := map[string]bool{"a": true, "b": true, "c": false}; !maps.Equal(ok, want) || !b.Partial || b.Self != "a" {
		t.Errorf("self %q nodes %v partial %v: want %v, partial", b.Self, ok, b.Partial, want)
	}

	// ?scope=node: a's own figures only.
	r = nodes["a"].do(t, "GET", "/v1/stats?scope=node", "")
	if err := json.Unmarshal([]byte(r.body), &b); err != nil {
		t.Fatal(err)
	}
	if got := sumOf(rowOf(t, b.Rules, "other").Allowed); got != 3 || len(b.Nodes) != 1 || b.Partial {
		t.Errorf("scope=node: %d allowed, nodes %+v: want a's 3 alone", got, b.Nodes)
	}
}

func TestUIFiles(t *testing.T) {
	tn := newTestNode(t, statsRules)
	r := tn.do("GET", "/ui/", "")
	if r.status != 200 || !strings.HasPrefix(r.hdr["Content-Type"], "text/html") || !strings.Contains(r.body, "<title>Sluice dashboard</title>") {
		t.Fatalf("GET /ui/: %d %v", r.status, r.hdr)
	}
	if csp := r.hdr["Content-Security-Policy"]; !strings.Contains(csp, "script-src 'self'") || strings.Contains(csp, "unsafe") {
		t.Errorf("CSP %q", csp)
	}
	// Every file the page names is served, with its type.
	for _, c := range []struct{ ref, ctype string }{{"app.js", "javascript"}, {"style.css", "text/css"}} {
		if !strings.Contains(r.body, `"`+c.ref+`"`) {
			t.Errorf("index.html does not reference %s", c.ref)
		}
		f := tn.do("GET", "/ui/"+c.ref, "")
		if f.status != 200 || !strings.Contains(f.hdr["Content-Type"], c.ctype) || len(f.body) == 0 {
			t.Errorf("GET /ui/%s: %d %q", c.ref, f.status, f.hdr["Content-Type"])
		}
	}
	if r2 := tn.do("GET", "/ui/", "", "If-None-Match: "+r.hdr["Etag"]); r2.status != 304 {
		t.Errorf("If-None-Match: %d, want 304", r2.status)
	}
	if r := tn.do("GET", "/ui", ""); r.status != 301 || !strings.HasSuffix(r.hdr["Location"], "/ui/") {
		t.Errorf("GET /ui: %d %v, want a redirect to /ui/", r.status, r.hdr)
	}
	if r := tn.do("GET", "/ui/nope.js", ""); r.status != 404 {
		t.Errorf("GET /ui/nope.js: %d, want 404", r.status)
	}
	if r := tn.do("POST", "/ui/", "x"); r.status != 405 {
		t.Errorf("POST /ui/: %d, want 405", r.status)
	}
}

// TestStatsTokenToPeers: a clustered node passes the caller's admin token
// on to its peers only when a cluster key authenticates the members; in
// an insecure cluster anyone may join, so the token is not sent.
func TestStatsTokenToPeers(t *testing.T) {
	for _, keyed := range []bool{true, false} {
		// The peer records the Authorization header it was sent.
		got := make(chan string, 1)
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		srv := &fasthttp.Server{Handler: func(ctx *fasthttp.RequestCtx) {
			select {
			case got <- string(ctx.Request.Header.Peek("Authorization")):
			default:
			}
			ctx.SetBodyString(`{"bucket_ms":10000}`)
		}}
		go func() { _ = srv.Serve(ln) }()
		t.Cleanup(func() { _ = srv.Shutdown() })

		n := guardNode(t, Config{AdminToken: "tok"})
		cfg := ClusterConfig{Self: "a", Insecure: !keyed}
		if keyed {
			cfg.ClusterKey = []byte("0123456789abcdef")
		}
		if err := n.EnableCluster(cfg); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { n.CloseCluster() })
		n.SetMembership(&staticMembership{ready: true, view: []member.Member{
			{Name: "a", State: member.StateAlive},
			{Name: "b", HTTPAddr: ln.Addr().String(), State: member.StateAlive},
		}})
		status, _, _ := serveGuard(t, n, "GET", "/v1/stats", "", "127.0.0.1", "Bearer tok")
		if status != 200 {
			t.Fatalf("keyed %v: GET /v1/stats: %d", keyed, status)
		}
		var auth string
		select {
		case auth = <-got:
		default:
			t.Fatalf("keyed %v: the peer was not asked", keyed)
		}
		if want := map[bool]string{true: "Bearer tok", false: ""}[keyed]; auth != want {
			t.Errorf("keyed %v: the peer was sent Authorization %q, want %q", keyed, auth, want)
		}
	}
}

// TestStatsPeersOverTLS: when the cluster's forwarding uses TLS (sluiced
// -tls-cert), the fan-out asks the peers over HTTPS with that config.
func TestStatsPeersOverTLS(t *testing.T) {
	peer := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/stats" || r.URL.Query().Get("scope") != "node" {
			http.NotFound(w, r)
			return
		}
		fmt.Fprintf(w, `{"self":"b","bucket_ms":%d,"store":{"breaker":"closed"}}`, StatsBucket.Milliseconds())
	}))
	t.Cleanup(peer.Close)
	roots := x509.NewCertPool()
	roots.AddCert(peer.Certificate())

	n := guardNode(t, Config{})
	cfg := ClusterConfig{Self: "a", ClusterKey: []byte("0123456789abcdef"), Forward: forward.DefaultConfig()}
	cfg.Forward.TLS = &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}
	if err := n.EnableCluster(cfg); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.CloseCluster() })
	n.SetMembership(&staticMembership{ready: true, view: []member.Member{
		{Name: "a", State: member.StateAlive},
		{Name: "b", HTTPAddr: peer.Listener.Addr().String(), State: member.StateAlive},
	}})
	status, _, ctx := serveGuard(t, n, "GET", "/v1/stats", "", "127.0.0.1", "")
	var b statsBody
	if err := json.Unmarshal(ctx.Response.Body(), &b); status != 200 || err != nil {
		t.Fatalf("GET /v1/stats: %d %v", status, err)
	}
	if len(b.Nodes) != 2 || !b.Nodes[1].OK || b.Partial {
		t.Errorf("nodes %+v partial %v: want b asked over HTTPS", b.Nodes, b.Partial)
	}
}

// TestStatsMergeHolders: a cluster's /v1/stats lists every node's gateway
// holders, the most lent first, with the node that lends (a peer's
// listing that does not name it gets the peer's name).
func TestStatsMergeHolders(t *testing.T) {
	a := newTestNode(t, statsRules)
	peer := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, `{"self":"b","bucket_ms":%d,"store":{"breaker":"closed"},
			"gateway_holders":[{"holder":"h2","lent":7,"rules":{"five":7},"keys":1,"until_ms":1}],"gateway_holders_more":2}`,
			StatsBucket.Milliseconds())
	}))
	t.Cleanup(peer.Close)
	body := a.n.stat.local()
	body.GatewayHolders = []engine.LeaseHolder{{Holder: "h1", Node: "a", Lent: 3, Rules: map[string]int64{"five": 3}, Keys: 2}}
	a.n.stat.merge(t.Context(), &body, []member.Member{{Name: "b", HTTPAddr: peer.Listener.Addr().String()}}, nil)
	got := body.GatewayHolders
	if len(got) != 2 || got[0].Holder != "h2" || got[0].Node != "b" || got[0].Rules["five"] != 7 ||
		got[1].Holder != "h1" || got[1].Node != "a" || body.GatewayHoldersMore != 2 {
		t.Fatalf("holders %+v (%d more), want h2 from b (7) then h1 from a (3), and b's 2 more", got, body.GatewayHoldersMore)
	}
}

// TestStatsListsMissingMembers: /v1/stats lists every member of the
// cluster that is dead or alive but not answering this node's pings, with
// its error, and says partial, without asking them (no wait for a timeout);
// a member that left gracefully is not listed. Fails before (issue 35):
// dead members were dropped and partial was false.
func TestStatsListsMissingMembers(t *testing.T) {
	n := guardNode(t, Config{})
	if err := n.EnableCluster(ClusterConfig{Self: "a", Insecure: true}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.CloseCluster() })
	n.SetMembership(&quorumMembership{staticMembership: staticMembership{ready: true, view: []member.Member{
		{Name: "a", State: member.StateAlive, Answering: true},
		{Name: "b", HTTPAddr: "127.0.0.1:1", State: member.StateAlive}, // alive, not answering: not asked
		{Name: "c", HTTPAddr: "127.0.0.1:2", State: member.StateDead},
		{Name: "d", HTTPAddr: "127.0.0.1:3", State: member.StateLeft},
	}}, q: member.Quorum{Seen: 1, Known: 3, Minority: true, Missing: []string{"b", "c"}}})
	status, _, ctx := serveGuard(t, n, "GET", "/v1/stats", "", "127.0.0.1", "")
	var b statsBody
	if err := json.Unmarshal(ctx.Response.Body(), &b); status != 200 || err != nil {
		t.Fatalf("GET /v1/stats: %d %v", status, err)
	}
	if !b.Partial {
		t.Error("partial false with a dead and a silent member")
	}
	got := map[string]string{}
	for _, nd := range b.Nodes {
		got[nd.Name] = nd.Error
	}
	if len(b.Nodes) != 3 || !strings.Contains(got["b"], "not answering") || !strings.Contains(got["c"], "dead") {
		t.Errorf("nodes %+v: want a, b (not answering) and c (dead), not d (left)", b.Nodes)
	}
}
