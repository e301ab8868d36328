package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/sluicehq/sluice/bench"
)

// compareCmd is `sluice-bench gateway`: a client.Limiter against the plain
// Go client on the same node (one on the memory store, one on Redis),
// started for the run.
func compareCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("gateway", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var cfg bench.CompareRunConfig
	fs.StringVar(&cfg.Sluiced, "sluiced", "", "node binary (go build ./cmd/sluiced); required")
	fs.StringVar(&cfg.RedisServer, "redis-server", "redis-server", "redis-server binary")
	stores := fs.String("stores", "memory,redis", "the nodes' stores: memory, redis or both")
	c := &cfg.Compare
	fs.IntVar(&c.FirstTouches, "first", 2000, "first-touch phase: keys decided for the first time by each side")
	fs.DurationVar(&c.Stream, "stream", 0, "cold-stream phases' length (0: 4s)")
	fs.IntVar(&c.Goroutines, "goroutines", 2, "goroutines deciding at once in the stream phases")
	fs.IntVar(&c.Keys, "keys", 1_000_000, "the cold stream's keys")
	fs.Float64Var(&c.ZipfS, "zipf-s", 1.1, "Zipf exponent of every stream")
	fs.IntVar(&c.WarmKeys, "warm-keys", 10_000, "the warm-up and leased Zipf phases' keys")
	fs.DurationVar(&c.WarmFor, "warm-for", 0, "longest warm-up phase (0: 3s)")
	fs.DurationVar(&c.Leased, "leased", 0, "each leased phase's length (0: 2s)")
	fs.IntVar(&c.LeaseRequests, "lease-requests", 0, "the Limiters' lease requests in flight per node (0: LimiterConfig's default)")
	fs.StringVar(&cfg.PerfDir, "perf", "", "record the node's CPU profile with perf record -g into this directory (node-<store>.perf.data)")
	jsonOut := fs.String("json", "", "write the results as JSON to this file")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if cfg.Sluiced == "" {
		fmt.Fprintln(stderr, "sluiced: required (go build -o /tmp/sluiced ./cmd/sluiced)")
		return 2
	}
	cfg.Stores = strings.Split(*stores, ",")
	cfg.Log = stderr
	r, err := bench.RunCompare(ctx, cfg)
	if r != nil {
		bench.WriteCompare(stdout, r, cfg.Compare)
	}
	if err != nil {
		fmt.Fprintf(stderr, "sluice-bench gateway: %v\n", err)
		return 1
	}
	if !writeJSON(*jsonOut, r, stderr) {
		return 1
	}
	return 0
}
