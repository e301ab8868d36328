package member_test

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/lease/clocktest"
	"github.com/sluicehq/sluice/node/member"
	"github.com/sluicehq/sluice/node/member/netsim"
)

// waitTimeout bounds every wait for gossip to converge. The timings of
// fastConfig converge in well under a second; the margin is for -race on a
// busy machine.
const waitTimeout = 15 * time.Second

// fastConfig is a LAN-ish config scaled down so that failure detection and
// merges take a fraction of a second.
// testKey is the cluster key of the test clusters.
var testKey = bytes.Repeat([]byte{7}, 32)

func fastConfig(name string) member.Config {
	cfg := member.DefaultConfig()
	cfg.Name = name
	cfg.ClusterKey = testKey
	cfg.ProbeInterval = 150 * time.Millisecond
	cfg.ProbeTimeout = 75 * time.Millisecond
	cfg.GossipInterval = 20 * time.Millisecond
	cfg.PushPullInterval = time.Second
	cfg.SuspicionMult = 2
	cfg.TCPTimeout = time.Second
	cfg.DeadNodeReclaimTime = time.Second
	cfg.JoinRetryMin = 20 * time.Millisecond
	cfg.JoinRetryMax = 100 * time.Millisecond
	cfg.ReconnectInterval = 150 * time.Millisecond
	if testing.Verbose() && os.Getenv("MEMBER_LOG") != "" {
		cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug})).With("node", name)
	}
	return cfg
}

var httpPorts atomic.Int32

type node struct {
	*member.Cluster
	tr   *netsim.FilterTransport
	http string

	mu    sync.Mutex
	views [][]member.Member
	msgs  [][]byte
}

func (n *node) lastView() []member.Member {
	n.mu.Lock()
	defer n.mu.Unlock()
	if len(n.views) == 0 {
		return nil
	}
	return n.views[len(n.views)-1]
}

func (n *node) messages() [][]byte {
	n.mu.Lock()
	defer n.mu.Unlock()
	return slices.Clone(n.msgs)
}

// startNode starts a member on a loopback FilterTransport; edit adjusts
// the config (seeds, key...). The node is closed in t.Cleanup.
func startNode(t *testing.T, name string, edit func(*member.Config)) *node {
	t.Helper()
	tr, err := netsim.NewLoopbackTransport()
	if err != nil {
		t.Fatal(err)
	}
	// HTTP addresses are only carried, never dialled: any distinct value.
	n := &node{tr: tr, http: fmt.Sprintf("127.0.0.1:%d", 9000+httpPorts.Add(1))}
	cfg := fastConfig(name)
	cfg.Transport = tr
	cfg.HTTPAddr = n.http
	cfg.OnMessage = func(msg []byte) {
		n.mu.Lock()
		n.msgs = append(n.msgs, msg)
		n.mu.Unlock()
	}
	if edit != nil {
		edit(&cfg)
	}
	c, err := member.Start(cfg, func(ms []member.Member) {
		n.mu.Lock()
		n.views = append(n.views, ms)
		n.mu.Unlock()
	})
	if err != nil {
		tr.Shutdown()
		t.Fatalf("start %s: %v", name, err)
	}
	n.Cluster = c
	t.Cleanup(func() { c.Close() })
	return n
}

func names(ms []member.Member) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = m.Name
	}
	return out
}

// waitMembers waits until every node in ns sees exactly want (names).
func waitMembers(t *testing.T, want []string, ns ...*node) {
	t.Helper()
	for _, n := range ns {
		clocktest.EventuallyState(t, waitTimeout, n.LocalName()+" to see "+strings.Join(want, ","), func() (bool, string) {
			got := names(n.Members())
			return slices.Equal(got, want), strings.Join(got, ",")
		})
	}
}

func seed(n *node) func(*member.Config) {
	return func(c *member.Config) { c.Join = []string{n.LocalAddr()} }
}

// cluster3 starts a, b, c; b joins a and c joins b (membership spreads
// transitively).
func cluster3(t *testing.T) (a, b, c *node) {
	t.Helper()
	a = startNode(t, "a", nil)
	b = startNode(t, "b", seed(a))
	c = startNode(t, "c", seed(b))
	waitMembers(t, []string{"a", "b", "c"}, a, b, c)
	return a, b, c
}

func TestThreeNodesJoinAndSeeHTTPAddrs(t *testing.T) {
	a, b, c := cluster3(t)
	want := map[string]string{"a": a.http, "b": b.http, "c": c.http}
	for _, n := range []*node{a, b, c} {
		if !n.Ready() {
			t.Errorf("%s: not ready after joining", n.LocalName())
		}
		for _, m := range n.Members() {
			if m.HTTPAddr != want[m.Name] {
				t.Errorf("%s sees %s with HTTP %q, want %q", n.LocalName(), m.Name, m.HTTPAddr, want[m.Name])
			}
			if m.State != member.StateAlive {
				t.Errorf("%s sees %s as %q", n.LocalName(), m.Name, m.State)
			}
			if m.GossipAddr == "" {
				t.Errorf("%s sees %s without gossip address", n.LocalName(), m.Name)
			}
		}
	}
	// onChange's latest list is the same view.
	clocktest.EventuallyState(t, waitTimeout, "a's onChange to report 3 members", func() (bool, string) {
		v := a.lastView()
		return slices.Equal(names(v), []string{"a", "b", "c"}), fmt.Sprint(v)
	})
}

func TestUnspecifiedHTTPHostIsAdvertisedIP(t *testing.T) {
	a := startNode(t, "a", func(c *member.Config) { c.HTTPAddr = ":8123" })
	if got := a.Members()[0].HTTPAddr; got != "127.0.0.1:8123" {
		t.Fatalf("HTTPAddr = %q, want 127.0.0.1:8123", got)
	}
}

func TestSingleNodeIsReadyAndSeesItself(t *testing.T) {
	a := startNode(t, "solo", nil)
	if !a.Ready() {
		t.Fatal("a node without seeds must be ready at once")
	}
	clocktest.EventuallyState(t, waitTimeout, "the first onChange", func() (bool, string) {
		v := a.lastView()
		return len(v) == 1 && v[0].Name == "solo", fmt.Sprint(v)
	})
	// Joining only itself is no join at all.
	if n, err := a.Join([]string{a.LocalAddr()}); n != 0 || err != nil {
		t.Fatalf("Join(self) = %d, %v; want 0, nil", n, err)
	}
}

func TestEncryptedCluster(t *testing.T) {
	key1 := testKey
	key2 := bytes.Repeat([]byte{2}, 32)
	withKey := func(k []byte, seeds ...*node) func(*member.Config) {
		return func(c *member.Config) {
			c.ClusterKey = k
			c.Insecure = k == nil
			for _, s := range seeds {
				c.Join = append(c.Join, s.LocalAddr())
			}
		}
	}
	a := startNode(t, "a", withKey(key1))
	b := startNode(t, "b", withKey(key1, a))
	waitMembers(t, []string{"a", "b"}, a, b)

	for _, tc := range []struct {
		name string
		key  []byte
	}{{"wrong-key", key2}, {"no-key", nil}} {
		x := startNode(t, tc.name, withKey(tc.key, a, b)) // joins in the background
		n, err := x.Join([]string{a.LocalAddr(), b.LocalAddr()})
		if n != 0 || err == nil {
			t.Errorf("%s: Join = %d, %v; want 0 and an error", tc.name, n, err)
		}
		if x.Ready() {
			t.Errorf("%s: ready although no seed accepted it", tc.name)
		}
		if got := names(x.Members()); !slices.Equal(got, []string{tc.name}) {
			t.Errorf("%s sees %v", tc.name, got)
		}
		x.Close()
	}
	if got := names(a.Members()); !slices.Equal(got, []string{"a", "b"}) {
		t.Errorf("a sees %v after the intruders", got)
	}
}

func TestKilledNodeIsDeclaredDead(t *testing.T) {
	a, b, c := cluster3(t)
	c.Close() // no Leave: a crash as far as the others can tell
	waitMembers(t, []string{"a", "b"}, a, b)
	for _, n := range []*node{a, b} {
		v := n.View()
		if len(v) != 3 || v[2].Name != "c" || v[2].State != member.StateDead {
			t.Errorf("%s's view: %+v; want c dead last", n.LocalName(), v)
		}
	}
}

func TestLeaveIsSeenAsLeft(t *testing.T) {
	a, b, c := cluster3(t)
	if err := c.Leave(2 * time.Second); err != nil {
		t.Fatal(err)
	}
	c.Close()
	waitMembers(t, []string{"a", "b"}, a, b)
	for _, n := range []*node{a, b} {
		v := n.View()
		if len(v) != 3 || v[2].Name != "c" || v[2].State != member.StateLeft {
			t.Errorf("%s's view: %+v; want c left last", n.LocalName(), v)
		}
	}
	// A node that left is not reconnected to: it stays gone. d, killed,
	// is a failed member that a's reconnect loop dials every interval; two
	// more dials of d are two reconnect rounds, in which c was not dialled.
	d := startNode(t, "d", seed(a))
	waitMembers(t, []string{"a", "b", "d"}, a, b, d)
	d.Close()
	waitMembers(t, []string{"a", "b"}, a, b)
	cDials, dDials := a.tr.Dials(c.LocalAddr()), a.tr.Dials(d.LocalAddr())
	clocktest.Eventually(t, waitTimeout, "two reconnect rounds on a (dials of the killed d)", func() bool {
		return a.tr.Dials(d.LocalAddr()) >= dDials+2
	})
	if n := a.tr.Dials(c.LocalAddr()) - cDials; n != 0 {
		t.Errorf("a dialled c, which left, %d times in two reconnect rounds", n)
	}
	if got := names(a.Members()); !slices.Equal(got, []string{"a", "b"}) {
		t.Errorf("a sees %v after c left", got)
	}
}

func TestOnChangeIsSerialAndSorted(t *testing.T) {
	var (
		inFlight, maxInFlight atomic.Int32
		mu                    sync.Mutex
		views                 [][]string
		hold                  atomic.Bool // the next call waits for release
		release               = make(chan struct{})
		releaseOnce           sync.Once
	)
	unhold := func() { releaseOnce.Do(func() { close(release) }) }
	onChange := func(ms []member.Member) {
		if n := inFlight.Add(1); n > maxInFlight.Load() {
			maxInFlight.Store(n)
		}
		if hold.CompareAndSwap(true, false) {
			<-release // held while the membership changes on: a concurrent call would come now
		}
		mu.Lock()
		views = append(views, names(ms))
		mu.Unlock()
		inFlight.Add(-1)
	}
	// Start z first so that sorting by name differs from join order.
	trZ, err := netsim.NewLoopbackTransport()
	if err != nil {
		t.Fatal(err)
	}
	cfg := fastConfig("z")
	cfg.Transport = trZ
	z, err := member.Start(cfg, onChange)
	if err != nil {
		t.Fatal(err)
	}
	defer z.Close()
	// The first call is the view when it is delivered (Start's doc): z
	// alone only if nobody joined before it. Wait for it, an event, before
	// starting the others; without the wait a late first delivery (a
	// loaded machine) was "[a z]", the test failing on scheduling.
	clocktest.EventuallyState(t, waitTimeout, "z's first onChange", func() (bool, string) {
		mu.Lock()
		defer mu.Unlock()
		return len(views) > 0, "no call yet"
	})
	// Hold the next call (m's join) until all four have joined: the
	// changes made meanwhile must wait for it, not call concurrently.
	hold.Store(true)
	defer unhold() // before z.Close, if the test fails while holding
	zn := &node{Cluster: z}
	var others []*node
	for _, name := range []string{"m", "b", "k", "a"} {
		others = append(others, startNode(t, name, seed(zn)))
	}
	want := []string{"a", "b", "k", "m", "z"}
	clocktest.Eventually(t, waitTimeout, "z to see everyone while its onChange is held", func() bool {
		return !hold.Load() && slices.Equal(names(z.Members()), want)
	})
	unhold()
	clocktest.EventuallyState(t, waitTimeout, "z's onChange to see everyone", func() (bool, string) {
		mu.Lock()
		defer mu.Unlock()
		return len(views) > 0 && slices.Equal(views[len(views)-1], want), fmt.Sprint(views)
	})
	// Make more events: one node leaves, one fails.
	others[0].Leave(time.Second)
	others[0].Close()
	others[1].Close()
	want = []string{"a", "k", "z"}
	clocktest.EventuallyState(t, waitTimeout, "z's onChange to see the departures", func() (bool, string) {
		mu.Lock()
		defer mu.Unlock()
		return slices.Equal(views[len(views)-1], want), fmt.Sprint(views)
	})
	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(views[0], []string{"z"}) {
		t.Errorf("first view %v, want just z", views[0])
	}
	for i, v := range views {
		if !slices.IsSorted(v) {
			t.Errorf("view %d not sorted: %v", i, v)
		}
		if i > 0 && slices.Equal(v, views[i-1]) {
			t.Errorf("view %d repeats the previous one: %v", i, v)
		}
	}
	if m := maxInFlight.Load(); m != 1 {
		t.Errorf("onChange ran %d times concurrently", m)
	}
}

func TestPartitionAndHeal(t *testing.T) {
	a, b, c := cluster3(t)
	netsim.Partition([]*netsim.FilterTransport{c.tr}, []*netsim.FilterTransport{a.tr, b.tr})
	waitMembers(t, []string{"a", "b"}, a, b)
	waitMembers(t, []string{"c"}, c)
	// Each side keeps working: c still answers for itself and stays ready.
	if !c.Ready() {
		t.Error("c lost readiness in a partition")
	}
	netsim.Heal([]*netsim.FilterTransport{c.tr}, []*netsim.FilterTransport{a.tr, b.tr})
	waitMembers(t, []string{"a", "b", "c"}, a, b, c)
}

func TestJoinRetriesInBackground(t *testing.T) {
	a := startNode(t, "a", nil)
	// b cannot reach a at first: its seed is blocked.
	tr, err := netsim.NewLoopbackTransport()
	if err != nil {
		t.Fatal(err)
	}
	tr.Block(a.LocalAddr())
	cfg := fastConfig("b")
	cfg.Transport = tr
	cfg.Join = []string{a.LocalAddr()}
	b, err := member.Start(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	clocktest.Eventually(t, waitTimeout, "b to try its blocked seed three times", func() bool {
		return tr.Dials(a.LocalAddr()) >= 3
	})
	if b.Ready() {
		t.Fatal("b ready although its only seed is unreachable")
	}
	tr.Unblock(a.LocalAddr())
	clocktest.EventuallyState(t, waitTimeout, "b to join in the background", func() (bool, string) {
		return b.Ready() && len(b.Members()) == 2, fmt.Sprint(b.Members())
	})
}

func TestBroadcastReachesAllMembers(t *testing.T) {
	a, b, c := cluster3(t)
	for i := range 3 {
		if err := a.Broadcast(fmt.Appendf(nil, "split:key-%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	want := []string{"split:key-0", "split:key-1", "split:key-2"}
	for _, n := range []*node{b, c} {
		clocktest.EventuallyState(t, waitTimeout, n.LocalName()+" to receive the broadcasts", func() (bool, string) {
			var got []string
			for _, m := range n.messages() {
				got = append(got, string(m))
			}
			slices.Sort(got)
			got = slices.Compact(got)
			return slices.Equal(got, want), fmt.Sprint(got)
		})
	}
	if got := a.messages(); len(got) != 0 {
		t.Errorf("the sender received its own broadcast: %q", got)
	}
	big := make([]byte, member.MaxMessageSize+1)
	if err := a.Broadcast(big); !errors.Is(err, member.ErrMessageTooLarge) {
		t.Errorf("Broadcast(%d bytes) = %v, want ErrMessageTooLarge", len(big), err)
	}
}

func TestCloseIsIdempotent(t *testing.T) {
	a := startNode(t, "a", nil)
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if err := a.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if err := a.Broadcast([]byte("x")); !errors.Is(err, member.ErrClosed) {
		t.Errorf("Broadcast after Close = %v, want ErrClosed", err)
	}
	if _, err := a.Join([]string{"127.0.0.1:1"}); !errors.Is(err, member.ErrClosed) {
		t.Errorf("Join after Close = %v, want ErrClosed", err)
	}
}

// BenchmarkMembers measures the /v1/members view of a 3-node cluster.
func BenchmarkMembers(b *testing.B) {
	nodes := make([]*member.Cluster, 0, 3)
	var seeds []string
	for _, name := range []string{"a", "b", "c"} {
		tr, err := netsim.NewLoopbackTransport()
		if err != nil {
			b.Fatal(err)
		}
		cfg := fastConfig(name)
		cfg.Transport = tr
		cfg.Join = seeds
		c, err := member.Start(cfg, nil)
		if err != nil {
			b.Fatal(err)
		}
		defer c.Close()
		nodes = append(nodes, c)
		seeds = []string{nodes[0].LocalAddr()}
	}
	clocktest.Eventually(b, waitTimeout, "the cluster to form", func() bool { return len(nodes[0].Members()) == 3 })
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if len(nodes[0].Members()) != 3 {
				b.Error("lost a member")
				return
			}
		}
	})
}
