package netsim

import (
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Proxy is a TCP proxy on a loopback port that can be cut, simulating a
// partition of a point-to-point link (the HTTP forwarding link between two
// nodes). While cut, every open connection through it is closed and new
// connections are accepted and closed at once, so clients fail fast rather
// than hang.
type Proxy struct {
	target string
	ln     net.Listener
	wg     sync.WaitGroup // the accept loop and every pipe goroutine
	delay  atomic.Int64   // one-way delay, ns (SetDelay)

	mu struct {
		sync.Mutex
		cut    bool
		closed bool
		conns  map[net.Conn]struct{} // both ends of every open pair
	}
}

// dialTimeout bounds how long the proxy waits for its target.
const dialTimeout = 2 * time.Second

// NewProxy listens on 127.0.0.1 with a free port and forwards every
// connection to target ("host:port"). Close it when done.
func NewProxy(target string) (*Proxy, error) { return ListenProxy("127.0.0.1:0", target) }

// ListenProxy is NewProxy listening on addr ("127.0.0.1:port").
func ListenProxy(addr, target string) (*Proxy, error) {
	if _, _, err := net.SplitHostPort(target); err != nil {
		return nil, fmt.Errorf("netsim: target %q: want host:port: %w", target, err)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("cannot listen for proxy: %w", err)
	}
	p := &Proxy{target: target, ln: ln}
	p.mu.conns = make(map[net.Conn]struct{})
	p.wg.Add(1)
	go p.acceptLoop()
	return p, nil
}

// Addr returns the proxy's address "127.0.0.1:port"; clients dial it
// instead of the target.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Target returns the address the proxy forwards to.
func (p *Proxy) Target() string { return p.target }

// Cut closes every open connection and makes new ones fail until Restore.
func (p *Proxy) Cut() {
	p.mu.Lock()
	p.mu.cut = true
	for c := range p.mu.conns {
		c.Close()
	}
	p.mu.Unlock()
}

// SetDelay makes every byte through the proxy arrive d later, each way
// (a round trip through it takes 2d more): an inter-region link. Bytes
// keep their order; d applies to what is read from then on.
func (p *Proxy) SetDelay(d time.Duration) { p.delay.Store(int64(max(d, 0))) }

// Restore lets new connections through again after Cut.
func (p *Proxy) Restore() {
	p.mu.Lock()
	p.mu.cut = false
	p.mu.Unlock()
}

// Close stops the proxy, closes every connection and waits for its
// goroutines. It is idempotent.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.mu.closed {
		p.mu.Unlock()
		return nil
	}
	p.mu.closed = true
	for c := range p.mu.conns {
		c.Close()
	}
	p.mu.Unlock()
	err := p.ln.Close()
	p.wg.Wait()
	return err
}

func (p *Proxy) acceptLoop() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			// Transient accept errors (EMFILE...): back off briefly.
			time.Sleep(10 * time.Millisecond)
			continue
		}
		if !p.track(c) {
			c.Close()
			continue
		}
		p.wg.Add(1)
		go p.serve(c)
	}
}

// track registers c unless the proxy is cut or closed.
func (p *Proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.mu.cut || p.mu.closed {
		return false
	}
	p.mu.conns[c] = struct{}{}
	return true
}

func (p *Proxy) untrack(c net.Conn) {
	p.mu.Lock()
	delete(p.mu.conns, c)
	p.mu.Unlock()
	c.Close()
}

func (p *Proxy) serve(client net.Conn) {
	defer p.wg.Done()
	defer p.untrack(client)
	server, err := net.DialTimeout("tcp", p.target, dialTimeout)
	if err != nil {
		return
	}
	if !p.track(server) {
		server.Close()
		return
	}
	defer p.untrack(server)
	done := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn) {
		p.copy(dst, src)
		// Half-close so that the peer sees EOF, as with a direct link.
		if tc, ok := dst.(*net.TCPConn); ok {
			tc.CloseWrite()
		}
		done <- struct{}{}
	}
	go pipe(server, client)
	go pipe(client, server)
	<-done
	<-done
}

// chunk is bytes read at a time, to be written at due.
type chunk struct {
	b   []byte
	due time.Time
}

// copy copies src to dst as io.Copy does, each chunk held back by the
// proxy's delay as of its reading.
func (p *Proxy) copy(dst, src net.Conn) {
	ch := make(chan chunk, 64)
	go func() {
		defer close(ch)
		for {
			buf := make([]byte, 32<<10)
			n, err := src.Read(buf)
			if n > 0 {
				ch <- chunk{b: buf[:n], due: time.Now().Add(time.Duration(p.delay.Load()))}
			}
			if err != nil {
				return
			}
		}
	}()
	failed := false
	for c := range ch { // drain even after a failed write: the reader ends with src
		if failed {
			continue
		}
		if w := time.Until(c.due); w > 0 {
			time.Sleep(w) // the simulated link's latency
		}
		if _, err := dst.Write(c.b); err != nil {
			failed = true
			src.Close()
		}
	}
}
