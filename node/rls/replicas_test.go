package rls_test

import (
	"fmt"
	"net"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/node/member"
)

// TestEnvoyReplicas: two nodes on one Redis, called in turn for one
// descriptor (15 a minute), as Envoy calls replicas behind a Service.
// Unclustered, each answers from its own leases: together they admit the
// limit and no more, but limit_remaining is each node's own view (its
// tokens and what Redis had left at its last lease), not one sequence, and
// a node may answer OVER_LIMIT while the other still holds tokens. As a
// cluster, each key has one owner that decides it: limit_remaining is one
// sequence, 14 down to 0, whichever node is called, as envoy's counter.
// (docs/envoy.md, "Replicas".)
func TestEnvoyReplicas(t *testing.T) {
	for _, clustered := range []bool{false, true} {
		t.Run(fmt.Sprintf("clustered=%v", clustered), func(t *testing.T) {
			e := newEnvoyEnv(t, "redis", transports[0])
			a, b := e.start(), e.start()
			if clustered {
				cluster(t, a, b)
			}
			var admitted int
			var seq []uint32
			for i := range 30 {
				n := []*envoyNode{a, b}[i%2]
				r := n.call(t, &rlsv3.RateLimitRequest{Domain: "counting", Descriptors: one("tenant=shared")})
				if r.OverallCode == ok {
					admitted++
					seq = append(seq, r.Statuses[0].LimitRemaining)
				}
			}
			t.Logf("limit_remaining of the admitted calls, alternating nodes: %v", seq)
			if admitted != 15 {
				t.Errorf("%d admitted in the window, want the limit, 15", admitted)
			}
			if !clustered {
				return
			}
			for i, left := range seq {
				if left != uint32(14-i) {
					t.Fatalf("clustered: limit_remaining %v, want one sequence from 14 down", seq)
				}
			}
		})
	}
}

// cluster makes the nodes' engines one cluster (static membership): each
// key is decided by its owner, the others forward to it.
func cluster(t *testing.T, ns ...*envoyNode) {
	t.Helper()
	var ms []member.Member
	for i, n := range ns {
		name := fmt.Sprintf("n%d", i)
		ccfg := node.ClusterConfig{Self: name, ClusterKey: []byte("0123456789abcdef")}
		ccfg.Forward.Timeout = 10 * time.Second // a loaded machine
		if err := n.node.EnableCluster(ccfg); err != nil {
			t.Fatal(err)
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		go n.node.Serve(ln)
		t.Cleanup(func() { n.node.CloseCluster() })
		ms = append(ms, member.Member{Name: name, HTTPAddr: ln.Addr().String(), GossipAddr: "127.0.0.1:1", State: member.StateAlive})
	}
	for _, n := range ns {
		n.node.MembersChanged(ms)
		n.node.SetMembership(&staticMembership{view: ms})
	}
}
