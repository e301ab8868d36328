package node_test

import (
	"fmt"

	"github.com/sluicehq/sluice/lease"
	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/node/hot"
	"github.com/sluicehq/sluice/node/member"
)

// A clustered node routes each counter key to its owner on the ring of
// live members. In sluiced, member.Start(cfg, n.MembersChanged) feeds the
// ring and n.SetMembership(cluster) answers /readyz and /v1/members.
func ExampleNode_EnableCluster() {
	store := lease.NewMemoryStore(lease.MemoryStoreConfig{})
	defer store.Close()
	mgr := lease.NewManager(store, lease.DefaultConfig())
	defer mgr.Close()

	n := node.New(node.DefaultConfig(), mgr)
	err := n.EnableCluster(node.ClusterConfig{Self: "node-a", ClusterKey: []byte("0123456789abcdef")})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer n.CloseCluster()
	fmt.Println(n.Ring().Members())

	// What memberlist reports after node-b joined.
	n.MembersChanged([]member.Member{
		{Name: "node-a", HTTPAddr: "10.0.0.1:8080", State: member.StateAlive},
		{Name: "node-b", HTTPAddr: "10.0.0.2:8080", State: member.StateAlive},
	})
	fmt.Println(n.Ring().Members())
	owner := n.Owner("per-key:user-42")
	fmt.Println(owner == "node-a" || owner == "node-b")
	// Output:
	// [node-a]
	// [node-a node-b]
	// true
}

// Hot keys: the node's hot.Hot splits a key past its rule's hot.threshold
// over the members. In sluiced, member.Config.OnMessage is n.GossipMessage
// (the plans other members gossip) and the member Cluster given to
// SetMembership gossips this node's plans.
func ExampleNode_Hot() {
	store := lease.NewMemoryStore(lease.MemoryStoreConfig{})
	defer store.Close()
	mgr := lease.NewManager(store, lease.DefaultConfig())
	defer mgr.Close()

	n := node.New(node.DefaultConfig(), mgr)
	hcfg := hot.DefaultConfig()
	hcfg.CapacityShare = 0.5 // also hot: a key taking half of this node's checks
	err := n.EnableCluster(node.ClusterConfig{Self: "node-a", ClusterKey: []byte("0123456789abcdef"), Hot: &hcfg})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer n.CloseCluster()
	mcfg := member.DefaultConfig()
	mcfg.OnMessage = n.GossipMessage
	_ = mcfg // member.Start(mcfg, n.MembersChanged)

	_, split := n.Hot().Lookup("per-key:user-42")
	fmt.Println(split, n.Hot().Stats().Active)
	// Output:
	// false 0
}
