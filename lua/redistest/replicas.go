package redistest

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/lease/clocktest"
)

// failoverTimeout bounds how long a replicated set may take to form (every
// replica in sync, every Sentinel seeing its replica).
const failoverTimeout = 30 * time.Second

// ReplicatedCluster is a Redis Cluster of three masters, each with one
// replica, started by StartClusterWithReplicas. Like a *Server's, its
// methods must not be called concurrently with its Servers' Kill or
// Restart.
type ReplicatedCluster struct {
	// Masters[i] serves a third of the slots; Replicas[i] replicates it.
	// After a failover the roles change; the slices keep the start roles.
	Masters, Replicas []*Server
	// NodeTimeout is the cluster-node-timeout the servers run with.
	NodeTimeout time.Duration
}

// Addrs are the addresses of every server, masters first: seeds for a
// Cluster client.
func (c *ReplicatedCluster) Addrs() []string {
	var addrs []string
	for _, s := range append(append([]*Server(nil), c.Masters...), c.Replicas...) {
		addrs = append(addrs, s.Addr)
	}
	return addrs
}

// StartClusterWithReplicas starts a Redis Cluster of three masters (the 16384
// slots split as redis-cli --cluster create splits them) and one replica per
// master, with cluster-node-timeout nodeTimeout (the time after which an
// unreachable master is failed over automatically by its replica), and waits
// until every replica is in sync and every node sees six nodes and all
// slots served. The servers are stopped in t.Cleanup.
//
// Replicas may fail over whatever their replication offset
// (cluster-replica-validity-factor 0), so that a test's failover does not
// depend on how long the replica was disconnected.
func StartClusterWithReplicas(t testing.TB, nodeTimeout time.Duration) *ReplicatedCluster {
	t.Helper()
	requireRedis(t)
	c := &ReplicatedCluster{NodeTimeout: nodeTimeout}
	start := func() *Server {
		for attempt := 0; attempt < 20; attempt++ {
			port, err := freePort(true)
			if err != nil {
				t.Fatalf("redistest: cannot find a free port: %v", err)
			}
			dir := t.TempDir()
			s := newServer(t, port, dir, []string{
				"--cluster-enabled", "yes",
				"--cluster-config-file", filepath.Join(dir, "nodes.conf"),
				"--cluster-node-timeout", strconv.FormatInt(nodeTimeout.Milliseconds(), 10),
				"--cluster-require-full-coverage", "yes",
				"--cluster-replica-validity-factor", "0",
				"--cluster-allow-replica-migration", "no",
			})
			if err := s.start(); err != nil {
				continue // port raced away; pick another
			}
			t.Cleanup(s.stop)
			return s
		}
		t.Fatalf("redistest: cannot start a cluster node")
		return nil
	}
	for i := 0; i < 3; i++ {
		c.Masters = append(c.Masters, start())
	}
	for i := 0; i < 3; i++ {
		c.Replicas = append(c.Replicas, start())
	}
	args := []string{"--cluster", "create"}
	for _, m := range c.Masters {
		args = append(args, m.Addr)
	}
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	cli := flavor(t).CLI
	if out, err := exec.Command(cli, args...).CombinedOutput(); err != nil {
		t.Fatalf("redistest: %s --cluster create: %v\n%s", cli, err, out)
	}
	for i, r := range c.Replicas {
		id := c.Masters[i].Do("CLUSTER", "MYID")
		out, err := exec.Command(cli, "--cluster", "add-node", r.Addr, c.Masters[i].Addr,
			"--cluster-slave", "--cluster-master-id", id).CombinedOutput()
		if err != nil {
			t.Fatalf("redistest: %s --cluster add-node %s as replica of %s: %v\n%s", cli, r.Addr, c.Masters[i].Addr, err, out)
		}
	}
	clocktest.EventuallyState(t, failoverTimeout, "redistest: replicated cluster to form", func() (bool, string) {
		for _, r := range c.Replicas {
			info, err := Command(r.Addr, "INFO", "replication")
			if err != nil || !strings.Contains(info, "master_link_status:up") {
				return false, fmt.Sprintf("replica %s: %v %s", r.Addr, err, info)
			}
		}
		for _, s := range append(append([]*Server(nil), c.Masters...), c.Replicas...) {
			info, err := Command(s.Addr, "CLUSTER", "INFO")
			if err != nil || !strings.Contains(info, "cluster_state:ok") ||
				!strings.Contains(info, "cluster_slots_ok:16384") || !strings.Contains(info, "cluster_known_nodes:6") {
				return false, fmt.Sprintf("node %s: %v %s", s.Addr, err, info)
			}
		}
		return true, ""
	})
	return c
}

// SlotMasters returns, for each of the 16384 slots, the address of the
// master that serves it ("" for none), as the first live node of the
// Cluster that answers CLUSTER SLOTS reports.
func (c *ReplicatedCluster) SlotMasters() ([]string, error) {
	var lastErr error
	for _, s := range append(append([]*Server(nil), c.Masters...), c.Replicas...) {
		if s.cmd == nil {
			continue
		}
		out, err := Command(s.Addr, "CLUSTER", "SHARDS")
		if err != nil {
			lastErr = err
			continue
		}
		return parseShards(out)
	}
	return nil, fmt.Errorf("no live node answers CLUSTER SHARDS: %v", lastErr)
}

// parseShards reads a flattened CLUSTER SHARDS reply: per shard "slots",
// then start/end pairs, then "nodes" and per node its fields as name/value
// pairs, among them "endpoint", "port" and "role".
func parseShards(out string) ([]string, error) {
	owners := make([]string, 16384)
	f := strings.Split(out, "\n")
	for i := 0; i < len(f); {
		if f[i] != "slots" {
			return nil, fmt.Errorf("CLUSTER SHARDS: unexpected %q at %d", f[i], i)
		}
		i++
		var ranges [][2]int
		for i+1 < len(f) && f[i] != "nodes" {
			lo, err1 := strconv.Atoi(f[i])
			hi, err2 := strconv.Atoi(f[i+1])
			if err1 != nil || err2 != nil || lo < 0 || hi >= 16384 || lo > hi {
				return nil, fmt.Errorf("CLUSTER SHARDS: bad slot range %q-%q", f[i], f[i+1])
			}
			ranges = append(ranges, [2]int{lo, hi})
			i += 2
		}
		i++ // "nodes"
		master := ""
		node := map[string]string{}
		flush := func() {
			if node["role"] == "master" && node["health"] != "fail" {
				master = node["endpoint"] + ":" + node["port"]
			}
			node = map[string]string{}
		}
		for i+1 < len(f) && f[i] != "slots" {
			if f[i] == "id" && len(node) > 0 {
				flush()
			}
			node[f[i]] = f[i+1]
			i += 2
		}
		flush()
		for _, r := range ranges {
			for s := r[0]; s <= r[1]; s++ {
				owners[s] = master
			}
		}
	}
	return owners, nil
}

// Server returns the Cluster's server at addr, or nil.
func (c *ReplicatedCluster) Server(addr string) *Server {
	for _, s := range append(append([]*Server(nil), c.Masters...), c.Replicas...) {
		if s.Addr == addr {
			return s
		}
	}
	return nil
}

// Sentinels is a master, its replica and a Sentinel watching them, started
// by StartSentinels.
type Sentinels struct {
	// Name is the master set's name ("sluice").
	Name string
	// Master and Replica are the start roles; a failover swaps them in
	// Redis, not here.
	Master, Replica *Server
	// Addrs are the Sentinels' addresses (one Sentinel, quorum 1).
	Addrs []string
}

// StartSentinels starts a master, a replica of it and one Sentinel (quorum
// 1) watching the master set "sluice" with down-after-milliseconds downAfter
// and failover-timeout 4 × downAfter (at least 2s), and waits until the
// replica is in sync and the Sentinel knows it. When the master is killed,
// the Sentinel promotes the replica after about downAfter plus its election
// (up to a second of random delay). Everything is stopped in t.Cleanup.
func StartSentinels(t testing.TB, downAfter time.Duration) *Sentinels {
	t.Helper()
	requireRedis(t)
	const name = "sluice"
	master := StartServer(t)
	host, port, _ := strings.Cut(master.Addr, ":")
	replica := StartServer(t, "--replicaof", host, port)
	clocktest.EventuallyState(t, failoverTimeout, "redistest: replica in sync", func() (bool, string) {
		info, err := Command(replica.Addr, "INFO", "replication")
		return err == nil && strings.Contains(info, "master_link_status:up"), fmt.Sprint(info, err)
	})
	failoverTimeout := 4 * downAfter
	if failoverTimeout < 2*time.Second {
		failoverTimeout = 2 * time.Second
	}
	sentinel := startSentinel(t, name, host, port, downAfter, failoverTimeout)
	clocktest.EventuallyState(t, failoverTimeout, "redistest: sentinel to see the replica", func() (bool, string) {
		out, err := Command(sentinel.Addr, "SENTINEL", "REPLICAS", name)
		ok := err == nil && strings.Contains(out, "\n"+replica.Addr+"\n") &&
			strings.Contains(out, "master-link-status\nok") && !strings.Contains(out, "disconnected")
		return ok, fmt.Sprint(out, err)
	})
	return &Sentinels{Name: name, Master: master, Replica: replica, Addrs: []string{sentinel.Addr}}
}

// MasterAddr is the master's address as the first Sentinel reports it.
func (s *Sentinels) MasterAddr() (string, error) {
	out, err := Command(s.Addrs[0], "SENTINEL", "get-master-addr-by-name", s.Name)
	if err != nil {
		return "", err
	}
	host, port, ok := strings.Cut(out, "\n")
	if !ok {
		return "", fmt.Errorf("sentinel reply %q", out)
	}
	return host + ":" + port, nil
}

// Running reports whether the server's process is running (not killed).
func (s *Server) Running() bool { return s.cmd != nil }
