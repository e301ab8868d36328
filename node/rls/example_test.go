package rls_test

import (
	"context"
	"fmt"
	"net"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sluicehq/sluice/lease"
	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/node/rls"
)

// A node serving envoyproxy/ratelimit's API with its configuration, called
// as Envoy calls it.
func ExampleServer() {
	store := lease.NewMemoryStore(lease.DefaultMemoryStoreConfig())
	defer store.Close()
	mgr := lease.NewManager(store, lease.DefaultConfig())
	defer mgr.Close()
	n := node.New(node.DefaultConfig(), mgr)
	n.SetRules(nil) // the HTTP rules, if any

	conf, err := rls.Parse(rls.Doc{Name: "config.yaml", Data: []byte(`
domain: edge_proxy_per_ip
descriptors:
  - key: remote_address
    rate_limit:
      unit: year
      requests_per_unit: 2
`)})
	if err != nil {
		panic(err)
	}
	srv := rls.NewServer(rls.ServerConfig{Engine: n, Metrics: n.MetricsSet()})
	srv.SetConfig(conf)
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	go srv.Serve(ln)
	defer srv.Close(context.Background())

	conn, _ := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	defer conn.Close()
	client := rlsv3.NewRateLimitServiceClient(conn)
	req := &rlsv3.RateLimitRequest{Domain: "edge_proxy_per_ip", Descriptors: []*ratelimitv3.RateLimitDescriptor{
		{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "remote_address", Value: "10.0.0.1"}}},
	}}
	for range 3 {
		resp, err := client.ShouldRateLimit(context.Background(), req)
		if err != nil {
			panic(err)
		}
		s := resp.Statuses[0]
		fmt.Println(resp.OverallCode, s.CurrentLimit.RequestsPerUnit, s.CurrentLimit.Unit, s.LimitRemaining)
	}
	// Output:
	// OK 2 YEAR 1
	// OK 2 YEAR 0
	// OVER_LIMIT 2 YEAR 0
}
