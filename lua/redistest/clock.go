package redistest

import (
	_ "embed"
	"encoding/binary"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
	"unsafe"
)

//go:embed testdata/fakeclock.c
var fakeclockC string

// Clock is the wall clock of a server started by StartWithClock: frozen
// until the test moves it. Redis TIME (and so every script's now), key
// expiry and everything else that reads the wall clock in the server see
// it; Redis's monotonic clock (its event loop and timers) stays real.
//
// It works by preloading a small shim (testdata/fakeclock.c, compiled with gcc when
// the server starts) that reads the wall clock from a shared-memory
// int64. Clock is safe for concurrent use.
type Clock struct {
	mu  sync.Mutex // serializes Advance
	mem []byte     // the shared mapping: int64 µs since the epoch
}

func (c *Clock) word() *int64 { return (*int64)(unsafe.Pointer(&c.mem[0])) }

// Now is the server's current time.
func (c *Clock) Now() time.Time { return time.UnixMicro(atomic.LoadInt64(c.word())) }

// Advance moves the server's clock forward by d (rounded down to the
// microsecond). The server reads the new time from its next clock read on.
func (c *Clock) Advance(d time.Duration) {
	if d < 0 {
		panic(fmt.Sprintf("redistest: clock cannot go back (Advance(%v))", d))
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	atomic.AddInt64(c.word(), d.Microseconds())
}

// Set moves the server's clock to t (truncated to the microsecond), back
// as well as forward: to redis-server a step of its wall clock, as after an
// NTP step (its event loop runs on the real monotonic clock). Keys already
// stored keep their expiry times, so a step back keeps them longer. For
// tests that restart from one instant on keys of their own each time, as
// the model harness does per run: a clock only moved forward by thousands
// of runs would pass what time.Time and the scripts' float arithmetic hold.
func (c *Clock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	atomic.StoreInt64(c.word(), t.UnixMicro())
}

// StartWithClock is StartServer with the server's wall clock frozen at
// start (truncated to the microsecond) and moved only by the returned
// Clock. Tests of time-dependent Redis scripts then see exact times, as
// tests of Go code do with a fake clock. It needs gcc (to build the shim)
// and a dynamically linked redis-server; without gcc it fails, or skips
// when SLUICE_SKIP_REDIS=1.
func StartWithClock(t testing.TB, start time.Time, extra ...string) (*Server, *Clock) {
	t.Helper()
	requireRedis(t)
	env, clock := newClock(t, start)
	var lastErr error
	for attempt := 0; attempt < 5; attempt++ {
		port, err := freePort(false)
		if err != nil {
			t.Fatalf("redistest: cannot find a free port: %v", err)
		}
		s := newServer(t, port, t.TempDir(), extra)
		s.env = env
		if lastErr = s.start(); lastErr != nil {
			continue
		}
		t.Cleanup(s.stop)
		clock.check(t, s)
		clocks.Store(s.Addr, clock)
		t.Cleanup(func() { clocks.Delete(s.Addr) })
		return s, clock
	}
	t.Fatalf("redistest: cannot start %s with a fake clock: %v", flavor(t).Server, lastErr)
	return nil, nil
}

// clocks holds the Clock of each running server StartWithClock started,
// by address.
var clocks sync.Map

// ClockAt is the Clock of the server StartWithClock started at addr, nil
// for any other address: for a Store under test that must read the
// server's clock where it would read the node's (lua.Config.Clock).
func ClockAt(addr string) *Clock {
	if c, ok := clocks.Load(addr); ok {
		return c.(*Clock)
	}
	return nil
}

// StartClusterWithClock is StartCluster with every master's wall clock
// frozen and moved by the returned Clock (one clock for the three
// processes). Redis Cluster times its gossip on the wall clock, so the
// clock moves 100ms per poll while the Cluster forms: it starts at start
// and ends wherever forming took it (read it with Now). Once formed, the
// Cluster needs no clock to serve, but do not expect a failover from it.
func StartClusterWithClock(t testing.TB, start time.Time) ([]string, *Clock) {
	t.Helper()
	requireRedis(t)
	env, clock := newClock(t, start)
	// A node timeout of 100 years: the Cluster's failure detection reads
	// the wall clock, and a test's Advance(time.Hour) would otherwise
	// make every peer look silent for an hour (PFAIL, then FAIL and
	// CLUSTERDOWN until the clock moves again; seen under -race).
	servers := startCluster(t, env, func() {
		clock.Advance(100 * time.Millisecond)
		time.Sleep(10 * time.Millisecond)
	}, strconv.FormatInt(100*365*24*3600*1000, 10))
	addrs := make([]string, len(servers))
	for i, s := range servers {
		clock.check(t, s)
		addrs[i] = s.Addr
	}
	return addrs, clock
}

// check fails the test unless s answers TIME with the clock's time.
func (c *Clock) check(t testing.TB, s *Server) {
	t.Helper()
	now := c.Now()
	want := fmt.Sprintf("%d\n%d", now.Unix(), now.Nanosecond()/1000)
	if out, err := Command(s.Addr, "TIME"); err != nil || out != want {
		t.Fatalf("redistest: %s with the fake clock answers TIME %q, want %q (%v); is it statically linked?", s.bin, out, want, err)
	}
}

// newClock builds the shim and the shared clock file at start, and returns
// the environment a redis-server needs to read it.
func newClock(t testing.TB, start time.Time) ([]string, *Clock) {
	t.Helper()
	dir := t.TempDir()
	shim := buildShim(t, dir)
	file := filepath.Join(dir, "clock")
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], uint64(start.UnixMicro()))
	if err := os.WriteFile(file, b[:], 0o600); err != nil {
		t.Fatalf("redistest: cannot write the clock file: %v", err)
	}
	f, err := os.OpenFile(file, os.O_RDWR, 0)
	if err != nil {
		t.Fatalf("redistest: %v", err)
	}
	mem, err := syscall.Mmap(int(f.Fd()), 0, 8, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	f.Close()
	if err != nil {
		t.Fatalf("redistest: cannot map the clock file: %v", err)
	}
	t.Cleanup(func() { _ = syscall.Munmap(mem) })
	return []string{"LD_PRELOAD=" + shim, "SLUICE_FAKE_CLOCK_FILE=" + file}, &Clock{mem: mem}
}

// buildShim compiles fakeclock.c into dir and returns the .so's path.
func buildShim(t testing.TB, dir string) string {
	t.Helper()
	gcc, err := exec.LookPath("gcc")
	if err != nil {
		if os.Getenv("SLUICE_SKIP_REDIS") == "1" {
			t.Skip("redistest: gcc not found (needed for the fake clock) and SLUICE_SKIP_REDIS=1")
		}
		t.Fatal("redistest: gcc not found: the fake clock for redis-server is a C shim built at test time (apt-get install gcc)")
	}
	src := filepath.Join(dir, "fakeclock.c")
	so := filepath.Join(dir, "fakeclock.so")
	if err := os.WriteFile(src, []byte(fakeclockC), 0o600); err != nil {
		t.Fatalf("redistest: %v", err)
	}
	out, err := exec.Command(gcc, "-shared", "-fPIC", "-O2", "-Wall", "-o", so, src).CombinedOutput()
	if err != nil {
		t.Fatalf("redistest: cannot build the fake clock shim: %v\n%s", err, out)
	}
	return so
}
