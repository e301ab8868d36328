// Package redistest starts real redis-server processes for tests: a
// standalone server (optionally with a frozen wall clock that the test
// moves, see StartWithClock), a Sentinel, a 3-master Redis Cluster, or, for
// failover tests, a Cluster of 3 masters with one replica each
// (StartClusterWithReplicas) and a master, replica and Sentinel
// (StartSentinels), each on free loopback ports, with persistence off,
// stopped in t.Cleanup.
//
// # Redis or Valkey
//
// The environment variable SLUICE_TEST_REDIS (EnvServer) chooses the
// server: unset or "redis" for redis-server and redis-cli (Redis 7),
// "valkey" for valkey-server and valkey-cli (Valkey 8). Every helper
// starts the chosen one, in every mode, and make test runs the packages
// that use this one on each:
//
//	SLUICE_TEST_REDIS=valkey go test -count=1 ./lua/
//
// The chosen binaries must be on PATH (and gcc for StartWithClock). When
// they are missing the test fails with an install hint, unless the
// environment variable SLUICE_SKIP_REDIS=1 is set, in which case it is
// skipped: CI must never skip silently.
//
// # Concurrency
//
// A *Server's methods must not be called concurrently with each other;
// Start, StartServer and StartCluster may be called from parallel tests.
package redistest

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/lease/clocktest"
)

// startTimeout bounds how long a server may take to answer PING, and a
// cluster to reach cluster_state:ok.
const startTimeout = 15 * time.Second

// Server is one redis-server process on a fixed loopback port. Kill and
// Restart keep the port, so clients reconnect to the same address.
type Server struct {
	// Addr is "127.0.0.1:port".
	Addr string

	t    testing.TB
	bin  string // the server binary (see EnvServer)
	port int
	dir  string
	args []string
	env  []string // extra environment, such as a fake clock's
	log  *syncBuffer
	cmd  *exec.Cmd
	done chan struct{} // closed when cmd has been waited for
}

// Start starts a standalone redis-server on a free loopback port and
// returns its address. It is stopped in t.Cleanup.
func Start(t testing.TB) string {
	t.Helper()
	return StartServer(t).Addr
}

// StartServer is Start returning the *Server, for tests that kill, pause or
// restart it. extra are additional redis-server arguments such as
// "--maxmemory", "10mb".
func StartServer(t testing.TB, extra ...string) *Server {
	t.Helper()
	requireRedis(t)
	var lastErr error
	for attempt := 0; attempt < 5; attempt++ {
		port, err := freePort(false)
		if err != nil {
			t.Fatalf("redistest: cannot find a free port: %v", err)
		}
		s := newServer(t, port, t.TempDir(), extra)
		if lastErr = s.start(); lastErr == nil {
			t.Cleanup(s.stop)
			return s
		}
	}
	t.Fatalf("redistest: cannot start %s: %v", flavor(t).Server, lastErr)
	return nil
}

// StartCluster starts three redis-server masters with cluster mode on free
// loopback ports, assigns all 16384 slots with redis-cli --cluster create
// (no replicas) and waits for cluster_state:ok on every node. It returns
// the three addresses; the servers are stopped in t.Cleanup.
func StartCluster(t testing.TB) []string {
	t.Helper()
	servers := StartClusterServers(t)
	addrs := make([]string, len(servers))
	for i, s := range servers {
		addrs[i] = s.Addr
	}
	return addrs
}

// StartClusterServers is StartCluster returning the *Servers.
func StartClusterServers(t testing.TB) []*Server {
	t.Helper()
	requireRedis(t)
	return startCluster(t, nil, nil, "2000")
}

// startCluster starts a three-master Cluster whose processes get env;
// wait, if not nil, is called between polls of the Cluster's state
// instead of sleeping (a frozen clock must move for the Cluster to form).
func startCluster(t testing.TB, env []string, wait func(), nodeTimeoutMs string) []*Server {
	t.Helper()
	var servers []*Server
	var addrs []string
	for len(servers) < 3 {
		port, err := freePort(true)
		if err != nil {
			t.Fatalf("redistest: cannot find a free port: %v", err)
		}
		dir := t.TempDir()
		s := newServer(t, port, dir, []string{
			"--cluster-enabled", "yes",
			"--cluster-config-file", filepath.Join(dir, "nodes.conf"),
			"--cluster-node-timeout", nodeTimeoutMs,
			"--cluster-require-full-coverage", "yes",
		})
		s.env = env
		if err := s.start(); err != nil {
			continue // port raced away; pick another
		}
		t.Cleanup(s.stop)
		servers = append(servers, s)
		addrs = append(addrs, s.Addr)
	}
	args := append([]string{"--cluster", "create"}, addrs...)
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	cli := flavor(t).CLI
	out, err := exec.Command(cli, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("redistest: %s --cluster create: %v\n%s", cli, err, out)
	}
	pause := func() { time.Sleep(50 * time.Millisecond) }
	if wait != nil {
		pause = wait
	}
	deadline := time.Now().Add(startTimeout)
	for _, s := range servers {
		for {
			info, err := Command(s.Addr, "CLUSTER", "INFO")
			if err == nil && strings.Contains(info, "cluster_state:ok") {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("redistest: cluster node %s not ok after %v: %v\n%s", s.Addr, startTimeout, err, info)
			}
			pause()
		}
	}
	// Every node must also agree that all slots are served, or the first
	// commands through a client could meet CLUSTERDOWN.
	for _, s := range servers {
		for {
			slots, err := Command(s.Addr, "CLUSTER", "INFO")
			if err == nil && strings.Contains(slots, "cluster_slots_ok:16384") && strings.Contains(slots, "cluster_known_nodes:3") {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("redistest: cluster node %s does not see all slots: %v\n%s", s.Addr, err, slots)
			}
			pause()
		}
	}
	return servers
}

// StartSentinel starts one redis-server in Sentinel mode on a free
// loopback port, monitoring the master at masterAddr under the name master
// (quorum 1), and waits until it reports the master. It returns the
// Sentinel's address; it is stopped in t.Cleanup.
func StartSentinel(t testing.TB, master, masterAddr string) string {
	t.Helper()
	requireRedis(t)
	host, port, err := net.SplitHostPort(masterAddr)
	if err != nil {
		t.Fatalf("redistest: master address %q: %v", masterAddr, err)
	}
	s := startSentinel(t, master, host, port, time.Second, 0)
	clocktest.EventuallyState(t, startTimeout, "redistest: sentinel "+s.Addr+" to report master "+master+" at "+masterAddr, func() (bool, string) {
		out, err := Command(s.Addr, "SENTINEL", "get-master-addr-by-name", master)
		return err == nil && out == host+"\n"+port, fmt.Sprintf("%q %v", out, err)
	})
	return s.Addr
}

// startSentinel starts one redis-server in Sentinel mode on a free
// loopback port (five tries), monitoring the master at host:port under
// name with quorum 1, down-after-milliseconds downAfter and, unless 0,
// failover-timeout failoverTimeout. It is stopped in t.Cleanup.
func startSentinel(t testing.TB, name, host, port string, downAfter, failoverTimeout time.Duration) *Server {
	t.Helper()
	var lastErr error
	for attempt := 0; attempt < 5; attempt++ {
		sport, err := freePort(false)
		if err != nil {
			t.Fatalf("redistest: cannot find a free port: %v", err)
		}
		dir := t.TempDir()
		conf := filepath.Join(dir, "sentinel.conf")
		text := fmt.Sprintf("port %d\nbind 127.0.0.1\ndir %s\n"+
			"sentinel monitor %s %s %s 1\n"+
			"sentinel down-after-milliseconds %s %d\n",
			sport, dir, name, host, port, name, downAfter.Milliseconds())
		if failoverTimeout > 0 {
			text += fmt.Sprintf("sentinel failover-timeout %s %d\nsentinel parallel-syncs %s 1\n",
				name, failoverTimeout.Milliseconds(), name)
		}
		if err := os.WriteFile(conf, []byte(text), 0o600); err != nil {
			t.Fatalf("redistest: %v", err)
		}
		s := newServer(t, sport, dir, nil)
		s.args = []string{conf, "--sentinel"}
		if lastErr = s.start(); lastErr != nil {
			continue
		}
		t.Cleanup(s.stop)
		return s
	}
	t.Fatalf("redistest: cannot start a sentinel: %v", lastErr)
	return nil
}

func newServer(t testing.TB, port int, dir string, extra []string) *Server {
	args := []string{
		"--port", strconv.Itoa(port),
		"--bind", "127.0.0.1",
		"--save", "",
		"--appendonly", "no",
		"--dir", dir,
		"--daemonize", "no",
		"--logfile", "",
		"--loglevel", "warning",
	}
	return &Server{
		Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)),
		t:    t,
		bin:  flavor(t).Server,
		port: port,
		dir:  dir,
		args: append(args, extra...),
		log:  &syncBuffer{},
	}
}

// start runs the process and waits until it answers PING.
func (s *Server) start() error {
	cmd := exec.Command(s.bin, s.args...)
	cmd.Dir = s.dir
	if len(s.env) > 0 {
		cmd.Env = append(os.Environ(), s.env...)
	}
	cmd.Stdout = s.log
	cmd.Stderr = s.log
	setDeathSignal(cmd)
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("cannot start %s: %w", s.bin, err)
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(done)
	}()
	s.cmd, s.done = cmd, done
	deadline := time.Now().Add(startTimeout)
	for {
		select {
		case <-done:
			return fmt.Errorf("%s on port %d exited: %s", s.bin, s.port, s.log.String())
		default:
		}
		if out, err := Command(s.Addr, "PING"); err == nil && out == "PONG" {
			return nil
		}
		if time.Now().After(deadline) {
			s.kill()
			return fmt.Errorf("%s on port %d did not answer PING within %v: %s", s.bin, s.port, startTimeout, s.log.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (s *Server) kill() {
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Signal(syscallSIGCONT) // a paused process must not hold its port
	_ = s.cmd.Process.Kill()
	<-s.done
	s.cmd = nil
}

func (s *Server) stop() { s.kill() }

// Kill stops the server abruptly (SIGKILL) and waits for it to exit. Its
// data is lost (persistence is off).
func (s *Server) Kill() {
	s.t.Helper()
	s.kill()
}

// Restart starts a killed server again on the same port, empty.
func (s *Server) Restart() {
	s.t.Helper()
	if s.cmd != nil {
		s.t.Fatalf("redistest: Restart of %s, which is running", s.Addr)
	}
	var err error
	for attempt := 0; attempt < 50; attempt++ { // the port may linger briefly
		if err = s.start(); err == nil {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	s.t.Fatalf("redistest: cannot restart %s: %v", s.Addr, err)
}

// Pause freezes the server (SIGSTOP): connections stay open and nothing is
// answered, like a hung or partitioned server. Resume undoes it.
func (s *Server) Pause() {
	s.t.Helper()
	if s.cmd == nil {
		s.t.Fatalf("redistest: Pause of %s, which is not running", s.Addr)
	}
	if err := s.cmd.Process.Signal(syscallSIGSTOP); err != nil {
		s.t.Fatalf("redistest: cannot pause %s: %v", s.Addr, err)
	}
}

// Resume continues a paused server.
func (s *Server) Resume() {
	s.t.Helper()
	if s.cmd == nil {
		return
	}
	if err := s.cmd.Process.Signal(syscallSIGCONT); err != nil {
		s.t.Fatalf("redistest: cannot resume %s: %v", s.Addr, err)
	}
}

// Do runs one command on the server and returns its reply as text (see
// Command), failing the test on error.
func (s *Server) Do(args ...string) string {
	s.t.Helper()
	out, err := Command(s.Addr, args...)
	if err != nil {
		s.t.Fatalf("redistest: %s %v: %v", s.Addr, args, err)
	}
	return out
}

// Command sends one command to addr over a fresh connection and returns the
// reply: a simple or bulk string as is, an integer in decimal, an array as
// its elements joined by "\n" (nested arrays flattened). A Redis error reply
// is returned as an error.
func Command(addr string, args ...string) (string, error) {
	conn, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	var b bytes.Buffer
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := conn.Write(b.Bytes()); err != nil {
		return "", err
	}
	var out []string
	if err := readReply(bufio.NewReader(conn), &out); err != nil {
		return "", err
	}
	return strings.Join(out, "\n"), nil
}

// CommandStats is the calls of each command of the server at addr, from
// INFO commandstats, by name without "cmdstat_" (INFO counts the commands
// a script runs too).
func CommandStats(addr string) (map[string]int64, error) {
	info, err := Command(addr, "INFO", "commandstats")
	if err != nil {
		return nil, err
	}
	stats := map[string]int64{}
	for _, line := range strings.Split(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":calls=")
		if !ok {
			continue
		}
		n, _ := strconv.ParseInt(strings.SplitN(rest, ",", 2)[0], 10, 64)
		stats[strings.TrimPrefix(name, "cmdstat_")] = n
	}
	return stats, nil
}

func readReply(r *bufio.Reader, out *[]string) error {
	line, err := r.ReadString('\n')
	if err != nil {
		return err
	}
	line = strings.TrimSuffix(line, "\r\n")
	if line == "" {
		return fmt.Errorf("empty reply line")
	}
	switch line[0] {
	case '+', ':':
		*out = append(*out, line[1:])
	case '-':
		return fmt.Errorf("redis error: %s", line[1:])
	case '$':
		n, err := strconv.Atoi(line[1:])
		if err != nil {
			return fmt.Errorf("bad bulk length %q", line)
		}
		if n < 0 {
			*out = append(*out, "")
			return nil
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(r, buf); err != nil {
			return err
		}
		*out = append(*out, string(buf[:n]))
	case '*':
		n, err := strconv.Atoi(line[1:])
		if err != nil {
			return fmt.Errorf("bad array length %q", line)
		}
		for i := 0; i < n; i++ {
			if err := readReply(r, out); err != nil {
				return err
			}
		}
	default:
		return fmt.Errorf("unexpected reply %q", line)
	}
	return nil
}

// freePort returns a loopback port that is free now; with bus, port+10000
// (the cluster bus port) is free too.
func freePort(bus bool) (int, error) {
	for attempt := 0; attempt < 100; attempt++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, err
		}
		port := l.Addr().(*net.TCPAddr).Port
		if !bus {
			l.Close()
			return port, nil
		}
		if port+10000 > 65535 {
			l.Close()
			continue
		}
		l2, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port+10000)))
		l.Close()
		if err != nil {
			continue
		}
		l2.Close()
		return port, nil
	}
	return 0, fmt.Errorf("no free port pair found")
}

// syncBuffer collects a server's log output.
type syncBuffer struct {
	mu sync.Mutex // protects b
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.b.Len() > 64<<10 {
		return len(p), nil // enough to diagnose a failure
	}
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}
