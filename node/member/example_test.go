package member_test

import (
	"fmt"

	"github.com/sluicehq/sluice/node/member"
)

// Two nodes on loopback: b joins a through a seed and sees both members
// with their HTTP addresses, as the node's ring would.
func ExampleStart() {
	cfg := member.DefaultConfig()
	cfg.Name = "node-a"
	cfg.ClusterKey, _ = member.ParseClusterKey("MDEyMzQ1Njc4OWFiY2RlZg==") // SLUICE_CLUSTER_KEY
	cfg.BindAddr = "127.0.0.1:0"                                           // a free port; production uses :7946
	cfg.HTTPAddr = ":8080"                                                 // the host becomes the advertised IP
	a, err := member.Start(cfg, nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer a.Close()

	cfg.Name = "node-b"
	cfg.HTTPAddr = "127.0.0.1:8081"
	b, err := member.Start(cfg, func(ms []member.Member) {
		// Rebuild the ring here; called serially with sorted live members.
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer b.Close()

	n, err := b.Join([]string{a.LocalAddr()})
	fmt.Println("seeds answered:", n, err, "ready:", b.Ready())
	for _, m := range b.Members() {
		fmt.Println(m.Name, m.HTTPAddr, m.State)
	}
	// Output:
	// seeds answered: 1 <nil> ready: true
	// node-a 127.0.0.1:8080 alive
	// node-b 127.0.0.1:8081 alive
}

func ExampleParseClusterKey() {
	key, err := member.ParseClusterKey("MDEyMzQ1Njc4OWFiY2RlZg==") // SLUICE_CLUSTER_KEY
	fmt.Println(len(key), err)
	_, err = member.ParseClusterKey("c2hvcnQ=")
	fmt.Println(err)
	// Output:
	// 16 <nil>
	// invalid cluster key: 5 bytes, want 16, 24 or 32 (AES-128, -192 or -256)
}
