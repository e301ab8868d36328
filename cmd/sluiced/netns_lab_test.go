//go:build netns

package main

// The network of the partition table (docs/faults.md, `make faults`):
// network namespaces, one per process (three sluiced nodes, Redis, the
// load client), each with one veth on a bridge of its own, addresses on a
// /24 that lives only inside those namespaces (no default route, no
// NAT), and faults made with iptables rules inside them. Everything it
// makes is named after this process's id and removed by close (also on
// SIGINT/SIGTERM, and by the next run when a run was killed).

import (
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
)

// lab is the namespaces and bridge of one run.
type lab struct {
	id     string            // "slf<pid>"
	ns     map[string]string // role → namespace
	ip     map[string]string // role → address
	bridge string
	mu     sync.Mutex
	undo   []func()
	closed bool
}

// labRoles are the namespaces a lab makes, with their addresses.
var labRoles = []struct{ role, ip string }{
	{"n1", "10.77.0.1"}, {"n2", "10.77.0.2"}, {"n3", "10.77.0.3"},
	{"redis", "10.77.0.10"}, {"client", "10.77.0.20"},
}

// run runs a command, returning its error with its output.
func runCmd(args ...string) error {
	out, err := exec.Command(args[0], args[1:]...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s: %v: %s", strings.Join(args, " "), err, out)
	}
	return nil
}

// newLab makes the network, or skips the test where it cannot (not root,
// no ip or iptables).
func newLab(t *testing.T) *lab {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("network namespaces need root")
	}
	for _, tool := range []string{"ip", "iptables"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not installed (make faults installs iproute2 and iptables)", tool)
		}
	}
	sweepLabs()
	l := &lab{id: "slf" + strconv.Itoa(os.Getpid()%100000), ns: map[string]string{}, ip: map[string]string{}}
	l.bridge = l.id + "b"
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGINT, syscall.SIGTERM)
	go func() {
		if _, ok := <-stop; ok {
			l.close()
			os.Exit(2)
		}
	}()
	t.Cleanup(func() {
		signal.Stop(stop)
		close(stop)
		l.close()
	})
	must := func(args ...string) {
		if err := runCmd(args...); err != nil {
			t.Fatal(err)
		}
	}
	must("ip", "link", "add", l.bridge, "type", "bridge")
	l.later(func() { _ = runCmd("ip", "link", "del", l.bridge) })
	must("ip", "link", "set", l.bridge, "up")
	for i, r := range labRoles {
		ns := l.id + "-" + r.role
		veth := fmt.Sprintf("%sv%d", l.id, i)
		must("ip", "netns", "add", ns)
		l.later(func() { _ = runCmd("ip", "netns", "del", ns) })
		must("ip", "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns)
		l.later(func() { _ = runCmd("ip", "link", "del", veth) })
		must("ip", "link", "set", veth, "master", l.bridge, "up")
		must("ip", "-n", ns, "addr", "add", r.ip+"/24", "dev", "eth0")
		must("ip", "-n", ns, "link", "set", "eth0", "up")
		must("ip", "-n", ns, "link", "set", "lo", "up")
		l.ns[r.role], l.ip[r.role] = ns, r.ip
	}
	return l
}

// later records an undo step; close runs them in reverse.
func (l *lab) later(f func()) {
	l.mu.Lock()
	l.undo = append(l.undo, f)
	l.mu.Unlock()
}

// close removes everything the lab made; idempotent.
func (l *lab) close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return
	}
	l.closed = true
	for i := len(l.undo) - 1; i >= 0; i-- {
		l.undo[i]()
	}
}

// cmd is a command run inside role's namespace.
func (l *lab) cmd(role string, args ...string) []string {
	return append([]string{"ip", "netns", "exec", l.ns[role]}, args...)
}

// drop makes role drop every packet from each of froms (INPUT: replies to
// what role sends are dropped too, as on a cut cable's receiving side).
func (l *lab) drop(t *testing.T, role string, froms ...string) {
	t.Helper()
	for _, f := range froms {
		if err := runCmd(l.cmd(role, "iptables", "-A", "INPUT", "-s", l.ip[f], "-j", "DROP")...); err != nil {
			t.Fatal(err)
		}
	}
}

// heal removes every rule drop added.
func (l *lab) heal(t *testing.T) {
	t.Helper()
	for _, r := range labRoles {
		if err := runCmd(l.cmd(r.role, "iptables", "-F", "INPUT")...); err != nil {
			t.Fatal(err)
		}
	}
}

var labName = regexp.MustCompile(`^slf(\d+)`)

// sweepLabs removes what an earlier run that was killed left: namespaces
// and bridges named slf<pid> whose process is gone.
func sweepLabs() {
	gone := func(name string) bool {
		m := labName.FindStringSubmatch(name)
		if m == nil {
			return false
		}
		pid, _ := strconv.Atoi(m[1])
		if pid == os.Getpid()%100000 {
			return false
		}
		_, err := os.Stat("/proc/" + m[1])
		return err != nil
	}
	if out, err := exec.Command("ip", "netns", "list").Output(); err == nil {
		for _, line := range strings.Split(string(out), "\n") {
			if f := strings.Fields(line); len(f) > 0 && gone(f[0]) {
				_ = runCmd("ip", "netns", "del", f[0])
			}
		}
	}
	if out, err := exec.Command("ip", "-o", "link", "show", "type", "bridge").Output(); err == nil {
		for _, line := range strings.Split(string(out), "\n") {
			if f := strings.Fields(line); len(f) > 1 {
				if name := strings.TrimSuffix(f[1], ":"); gone(name) {
					_ = runCmd("ip", "link", "del", name)
				}
			}
		}
	}
}
