// Package netsim simulates network partitions in-process, for tests of the
// cluster layer: a memberlist transport that drops a chosen peer's traffic
// ([FilterTransport]) and a cuttable loopback TCP proxy ([Proxy]) for the
// HTTP forwarding link between nodes.
//
// Both are real network plumbing (they wrap real loopback sockets); only
// the loss is simulated. They are meant for tests and benchmarks, never for
// production traffic.
//
// # Concurrency
//
// Every exported type is safe for concurrent use. Block, Unblock, Cut and
// Restore may be called at any time, from any goroutine, while traffic
// flows.
package netsim

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/hashicorp/memberlist"
)

// ErrBlocked means the peer a FilterTransport was asked to dial is blocked:
// the simulated network drops everything between the two.
var ErrBlocked = errors.New("netsim: peer blocked")

// FilterTransport wraps a memberlist.Transport and drops the traffic of the
// peers it is told to block, simulating a partition.
//
// For a blocked peer address:
//   - packets written to it are silently dropped (UDP is lossy anyway);
//   - dials to it fail at once with [ErrBlocked];
//   - packets received from it are dropped.
//
// Incoming streams cannot be attributed to a peer (the dialer's TCP source
// port is ephemeral), so a stream a blocked peer opens to us is delivered.
// A real partition therefore needs both sides to block each other, which
// [Partition] does. Addresses are gossip addresses "ip:port" as memberlist
// writes them.
type FilterTransport struct {
	inner    memberlist.Transport
	packetCh chan *memberlist.Packet
	streamCh chan net.Conn
	stop     chan struct{} // closed first by Shutdown: stop delivering
	done     chan struct{} // closed once inner is shut down: stop draining
	wg       sync.WaitGroup
	once     sync.Once

	mu struct {
		sync.Mutex
		blocked map[string]struct{} // normalised addresses
		dials   map[string]int      // DialTimeout calls per normalised address
	}
}

// NewFilterTransport wraps inner (typically a memberlist.NetTransport on a
// loopback port). The FilterTransport owns inner from now on: its Shutdown
// shuts inner down.
func NewFilterTransport(inner memberlist.Transport) *FilterTransport {
	t := &FilterTransport{
		inner:    inner,
		packetCh: make(chan *memberlist.Packet),
		streamCh: make(chan net.Conn),
		stop:     make(chan struct{}),
		done:     make(chan struct{}),
	}
	t.mu.blocked = make(map[string]struct{})
	t.mu.dials = make(map[string]int)
	t.wg.Add(2)
	go t.pumpPackets()
	go t.pumpStreams()
	return t
}

// NewLoopbackTransport starts a memberlist.NetTransport on 127.0.0.1 with a
// free port (TCP and UDP on the same number) and wraps it. It retries a few
// times when the UDP port turns out to be taken.
func NewLoopbackTransport() (*FilterTransport, error) {
	var lastErr error
	for range 10 {
		nt, err := memberlist.NewNetTransport(&memberlist.NetTransportConfig{
			BindAddrs: []string{"127.0.0.1"},
			BindPort:  0,
		})
		if err == nil {
			return NewFilterTransport(nt), nil
		}
		lastErr = err
	}
	return nil, fmt.Errorf("cannot start a loopback transport: %w", lastErr)
}

// Addr returns the gossip address "ip:port" the wrapped transport listens on
// when it is a memberlist.NetTransport, else "".
func (t *FilterTransport) Addr() string {
	nt, ok := t.inner.(*memberlist.NetTransport)
	if !ok {
		return ""
	}
	return net.JoinHostPort("127.0.0.1", fmt.Sprint(nt.GetAutoBindPort()))
}

// Block drops all traffic to and from addr (see the type's comment for
// incoming streams) until Unblock.
func (t *FilterTransport) Block(addr string) {
	t.mu.Lock()
	t.mu.blocked[normalise(addr)] = struct{}{}
	t.mu.Unlock()
}

// Unblock lets traffic to and from addr flow again.
func (t *FilterTransport) Unblock(addr string) {
	t.mu.Lock()
	delete(t.mu.blocked, normalise(addr))
	t.mu.Unlock()
}

// UnblockAll lets all traffic flow again.
func (t *FilterTransport) UnblockAll() {
	t.mu.Lock()
	clear(t.mu.blocked)
	t.mu.Unlock()
}

// Blocked reports whether addr is blocked.
func (t *FilterTransport) Blocked(addr string) bool {
	t.mu.Lock()
	_, ok := t.mu.blocked[normalise(addr)]
	t.mu.Unlock()
	return ok
}

// Dials returns how many times memberlist has dialled addr (a push-pull,
// a join, a reconnect), blocked or not: a test waits for an attempt, an
// event, instead of sleeping, and checks that an address is left alone.
func (t *FilterTransport) Dials(addr string) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.mu.dials[normalise(addr)]
}

// Partition blocks every transport of side a from every transport of side b
// and the reverse, using each transport's [FilterTransport.Addr].
func Partition(a, b []*FilterTransport) {
	for _, x := range a {
		for _, y := range b {
			x.Block(y.Addr())
			y.Block(x.Addr())
		}
	}
}

// Heal undoes [Partition].
func Heal(a, b []*FilterTransport) {
	for _, x := range a {
		for _, y := range b {
			x.Unblock(y.Addr())
			y.Unblock(x.Addr())
		}
	}
}

// FinalAdvertiseAddr implements memberlist.Transport.
func (t *FilterTransport) FinalAdvertiseAddr(ip string, port int) (net.IP, int, error) {
	return t.inner.FinalAdvertiseAddr(ip, port)
}

// WriteTo implements memberlist.Transport; packets to a blocked peer are
// dropped without error, as a lossy network would.
func (t *FilterTransport) WriteTo(b []byte, addr string) (time.Time, error) {
	if t.Blocked(addr) {
		return time.Now(), nil
	}
	return t.inner.WriteTo(b, addr)
}

// PacketCh implements memberlist.Transport.
func (t *FilterTransport) PacketCh() <-chan *memberlist.Packet { return t.packetCh }

// DialTimeout implements memberlist.Transport; dials to a blocked peer fail
// at once with ErrBlocked.
func (t *FilterTransport) DialTimeout(addr string, timeout time.Duration) (net.Conn, error) {
	t.mu.Lock()
	t.mu.dials[normalise(addr)]++
	t.mu.Unlock()
	if t.Blocked(addr) {
		return nil, fmt.Errorf("cannot dial %s: %w", addr, ErrBlocked)
	}
	return t.inner.DialTimeout(addr, timeout)
}

// StreamCh implements memberlist.Transport.
func (t *FilterTransport) StreamCh() <-chan net.Conn { return t.streamCh }

// Shutdown implements memberlist.Transport: it stops the packet pump and
// shuts the wrapped transport down. It is idempotent.
func (t *FilterTransport) Shutdown() error {
	var err error
	t.once.Do(func() {
		// Keep draining inner's channels while it shuts down: a
		// NetTransport waits for its readers, which may be blocked
		// handing us a packet or a stream.
		close(t.stop)
		err = t.inner.Shutdown()
		close(t.done)
		t.wg.Wait()
	})
	return err
}

// pumpPackets forwards received packets, dropping those of blocked peers,
// and drops everything once Shutdown has begun.
func (t *FilterTransport) pumpPackets() {
	defer t.wg.Done()
	in := t.inner.PacketCh()
	for {
		select {
		case <-t.done:
			return
		case p, ok := <-in:
			if !ok {
				return
			}
			if p == nil {
				continue
			}
			if p.From != nil && t.Blocked(p.From.String()) {
				continue
			}
			select {
			case t.packetCh <- p:
			case <-t.stop: // shutting down: drop
			}
		}
	}
}

// pumpStreams forwards accepted streams, and closes them once Shutdown has
// begun.
func (t *FilterTransport) pumpStreams() {
	defer t.wg.Done()
	in := t.inner.StreamCh()
	for {
		select {
		case <-t.done:
			return
		case c, ok := <-in:
			if !ok {
				return
			}
			select {
			case t.streamCh <- c:
			case <-t.stop:
				c.Close()
			}
		}
	}
}

// normalise turns "ip:port" into its canonical form so that Block("::1:7")
// style spellings of one address compare equal; other strings stay as given.
func normalise(addr string) string {
	if ap, err := netip.ParseAddrPort(addr); err == nil {
		return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port()).String()
	}
	return addr
}
