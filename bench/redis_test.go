package bench

import (
	"context"
	"os/exec"
	"testing"
	"time"
)

// TestRedisCommandStatsLive runs against a real redis-server on a free
// loopback port (persistence off), stopped in Cleanup.
func TestRedisCommandStatsLive(t *testing.T) {
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Skip("redis-server not installed")
	}
	p, addr, err := StartRedis("", t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Stop(5 * time.Second) })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	before, err := RedisCommandStats(ctx, addr)
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if _, err := redisCommand(ctx, addr, "SET", "k", "v"); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := redisCommand(ctx, addr, "GET", "k"); err != nil {
		t.Fatal(err)
	}
	if _, err := redisCommand(ctx, addr, "NOSUCHCOMMAND"); err == nil {
		t.Fatal("an error reply must be an error")
	}
	after, err := RedisCommandStats(ctx, addr)
	if err != nil {
		t.Fatal(err)
	}
	diff, total := DiffCommandStats(before, after)
	if diff["set"] != 3 || diff["get"] != 1 || total != 4 {
		t.Fatalf("diff %v total %d, want set 3 get 1", diff, total)
	}
	if p.CPU() < 0 {
		t.Fatal("negative CPU")
	}
	if err := p.Stop(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	if ex, _ := p.Exited(); !ex {
		t.Fatal("redis-server still running after Stop")
	}
}
