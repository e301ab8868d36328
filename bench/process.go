package bench

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/valyala/fasthttp"
)

// Process is a child process the suite started (redis-server, sluiced, the
// ceiling server). Its output is kept in a small ring for error messages.
// Safe for concurrent use.
type Process struct {
	Name string
	cmd  *exec.Cmd
	done chan struct{}
	err  error // set before done is closed
	out  *tailBuffer
	once sync.Once
}

// StartProcess starts bin with args. The child gets SIGKILL if this
// process dies first (Linux Pdeathsig), so an interrupted suite leaves
// nothing behind. SLUICE_* variables are not passed on: the suite's flags
// are the whole configuration.
func StartProcess(name, bin string, args ...string) (*Process, error) {
	cmd := exec.Command(bin, args...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "SLUICE_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	out := &tailBuffer{max: 8 << 10}
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("cannot start %s: %w", name, err)
	}
	p := &Process{Name: name, cmd: cmd, done: make(chan struct{}), out: out}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// Pid is the child's process id.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// CPU is the child's user+system CPU seconds so far (0 once it exited).
func (p *Process) CPU() float64 {
	c, err := ProcCPU(p.Pid())
	if err != nil {
		return 0
	}
	return c
}

// Exited reports whether the child has ended, and how.
func (p *Process) Exited() (bool, error) {
	select {
	case <-p.done:
		return true, p.err
	default:
		return false, nil
	}
}

// Output is the last few KB the child wrote.
func (p *Process) Output() string { return p.out.String() }

// Stop sends SIGTERM, waits up to timeout, then SIGKILLs. Idempotent.
func (p *Process) Stop(timeout time.Duration) error {
	var err error
	p.once.Do(func() {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(timeout):
			_ = p.cmd.Process.Kill()
			<-p.done
			err = fmt.Errorf("%s did not stop within %v after SIGTERM; killed", p.Name, timeout)
		}
	})
	return err
}

type tailBuffer struct {
	mu  sync.Mutex
	max int
	b   []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if len(t.b) > t.max {
		t.b = append(t.b[:0], t.b[len(t.b)-t.max:]...)
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return strings.TrimSpace(string(t.b))
}

// FreePort returns a loopback host:port that was free a moment ago.
func FreePort() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("cannot find a free port: %w", err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr, nil
}

// ErrNotReady means a started process did not answer in time.
var ErrNotReady = errors.New("process not ready")

// WaitHTTP polls GET http://addr+path until it answers 200, p exits, or
// timeout passes.
func WaitHTTP(addr, path string, p *Process, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	var last error
	for time.Now().Before(deadline) {
		if ex, err := p.Exited(); ex {
			return fmt.Errorf("%w: %s exited (%v): %s", ErrNotReady, p.Name, err, lastLines(p.Output(), 5))
		}
		code, _, err := fasthttp.GetTimeout(nil, "http://"+addr+path, time.Second)
		if err == nil && code == 200 {
			return nil
		}
		last = err
		if err == nil {
			last = fmt.Errorf("status %d", code)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("%w: %s at %s%s after %v: %v", ErrNotReady, p.Name, addr, path, timeout, last)
}

func lastLines(s string, n int) string {
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}

// StartRedis starts redis-server on a free loopback port with persistence
// off, and waits for PING.
func StartRedis(bin, dir string) (*Process, string, error) {
	if bin == "" {
		bin = "redis-server"
	}
	addr, err := FreePort()
	if err != nil {
		return nil, "", err
	}
	_, port, _ := net.SplitHostPort(addr)
	p, err := StartProcess("redis-server", bin, "--port", port, "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", dir, "--daemonize", "no", "--loglevel", "warning")
	if err != nil {
		return nil, "", err
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err = RedisPing(ctx, addr)
		cancel()
		if err == nil {
			return p, addr, nil
		}
		if ex, _ := p.Exited(); ex || time.Now().After(deadline) {
			p.Stop(time.Second)
			return nil, "", fmt.Errorf("%w: redis-server on %s: %v: %s", ErrNotReady, addr, err, lastLines(p.Output(), 3))
		}
		time.Sleep(50 * time.Millisecond)
	}
}
