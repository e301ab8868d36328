package netsim_test

import (
	"bufio"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/sluicehq/sluice/node/member/netsim"
)

// ioTimeout bounds every read and write, so a broken proxy fails the test
// instead of hanging it.
const ioTimeout = 5 * time.Second

// echoServer answers every line with the same line, until the test ends.
func echoServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				io.Copy(c, c)
			}()
		}
	}()
	return ln.Addr().String()
}

// roundTrip dials addr, sends a line and reads it back.
func roundTrip(addr, line string) error {
	c, err := net.DialTimeout("tcp", addr, ioTimeout)
	if err != nil {
		return err
	}
	defer c.Close()
	return echoOn(c, bufio.NewReader(c), line)
}

func echoOn(c net.Conn, r *bufio.Reader, line string) error {
	c.SetDeadline(time.Now().Add(ioTimeout))
	if _, err := io.WriteString(c, line+"\n"); err != nil {
		return err
	}
	got, err := r.ReadString('\n')
	if err != nil {
		return err
	}
	if got != line+"\n" {
		return errors.New("echo mismatch: " + got)
	}
	return nil
}

func TestProxyCutAndRestore(t *testing.T) {
	p, err := netsim.NewProxy(echoServer(t))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()

	// A long-lived connection, like a keep-alive forwarding link.
	c, err := net.DialTimeout("tcp", p.Addr(), ioTimeout)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := bufio.NewReader(c)
	if err := echoOn(c, r, "before"); err != nil {
		t.Fatalf("through the proxy: %v", err)
	}

	p.Cut()
	if err := echoOn(c, r, "during"); err == nil {
		t.Fatal("an open connection still works after Cut")
	}
	if err := roundTrip(p.Addr(), "new"); err == nil {
		t.Fatal("a new connection works after Cut")
	}

	p.Restore()
	if err := roundTrip(p.Addr(), "after"); err != nil {
		t.Fatalf("after Restore: %v", err)
	}

	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if err := roundTrip(p.Addr(), "closed"); err == nil {
		t.Fatal("a connection works after Close")
	}
}

func TestProxyRejectsBadTarget(t *testing.T) {
	if _, err := netsim.NewProxy("no-port"); err == nil {
		t.Fatal("NewProxy accepted a target without a port")
	}
}

// recvPacket waits up to d for a packet on tr.
func recvPacket(tr *netsim.FilterTransport, d time.Duration) ([]byte, bool) {
	select {
	case p := <-tr.PacketCh():
		return p.Buf, true
	case <-time.After(d):
		return nil, false
	}
}

func TestFilterTransportBlocksPeer(t *testing.T) {
	a, err := netsim.NewLoopbackTransport()
	if err != nil {
		t.Fatal(err)
	}
	defer a.Shutdown()
	b, err := netsim.NewLoopbackTransport()
	if err != nil {
		t.Fatal(err)
	}
	defer b.Shutdown()

	send := func(from, to *netsim.FilterTransport, msg string) {
		t.Helper()
		if _, err := from.WriteTo([]byte(msg), to.Addr()); err != nil {
			t.Fatalf("WriteTo: %v", err)
		}
	}
	// Loopback UDP does not lose packets; a missing packet is the filter.
	send(a, b, "hello")
	if got, ok := recvPacket(b, ioTimeout); !ok || string(got) != "hello" {
		t.Fatalf("b received %q, %v; want hello", got, ok)
	}

	// a blocks b: a sends nothing to b, drops what b sends, cannot dial b.
	a.Block(b.Addr())
	if !a.Blocked(b.Addr()) {
		t.Fatal("Blocked = false after Block")
	}
	send(a, b, "outgoing")
	send(b, a, "incoming")
	if _, err := a.DialTimeout(b.Addr(), time.Second); !errors.Is(err, netsim.ErrBlocked) {
		t.Fatalf("dial to a blocked peer: %v, want ErrBlocked", err)
	}
	// A marker from an unblocked third peer, queued on a's socket after
	// "incoming", proves "incoming" was dropped rather than delayed.
	c, err := netsim.NewLoopbackTransport()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Shutdown()
	send(c, a, "marker-ca")
	if got, _ := recvPacket(a, ioTimeout); string(got) != "marker-ca" {
		t.Errorf("a's next packet is %q, want marker-ca (incoming was not dropped)", got)
	}
	// The same for outgoing: the next packet b sees is sent after Unblock.
	a.Unblock(b.Addr())
	send(a, b, "marker-ab")
	if got, _ := recvPacket(b, ioTimeout); string(got) != "marker-ab" {
		t.Errorf("b's next packet is %q, want marker-ab (outgoing was not dropped)", got)
	}
	send(b, a, "after")
	if got, _ := recvPacket(a, ioTimeout); string(got) != "after" {
		t.Errorf("a received %q after Unblock, want after", got)
	}
	conn, err := a.DialTimeout(b.Addr(), time.Second)
	if err != nil {
		t.Fatalf("dial after Unblock: %v", err)
	}
	conn.Close()
}

func TestFilterTransportShutdownIsIdempotent(t *testing.T) {
	a, err := netsim.NewLoopbackTransport()
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Shutdown(); err != nil {
		t.Fatal(err)
	}
	if err := a.Shutdown(); err != nil {
		t.Fatalf("second Shutdown: %v", err)
	}
}

// A delayed proxy adds its delay each way: a round trip through it takes
// at least twice the delay (a lower bound: a loaded machine only adds).
func TestProxyDelay(t *testing.T) {
	p, err := netsim.NewProxy(echoServer(t))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	const d = 20 * time.Millisecond
	p.SetDelay(d)
	start := time.Now()
	if err := roundTrip(p.Addr(), "hello"); err != nil {
		t.Fatal(err)
	}
	if rt := time.Since(start); rt < 2*d {
		t.Fatalf("round trip %v through a proxy delaying %v each way, want ≥ %v", rt, d, 2*d)
	}
	p.SetDelay(0)
	if err := roundTrip(p.Addr(), "again"); err != nil {
		t.Fatalf("after SetDelay(0): %v", err)
	}
}
