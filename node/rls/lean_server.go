package rls

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"sync"
	"time"
)

// TransportLean: its bounds, its server (connections, the workers that
// run calls, graceful shutdown). A connection's frames are read in
// lean_conn.go, its streams in lean_stream.go and lean_headers.go, flow
// control in lean_flow.go, writes in lean_write.go, the bounds on
// unfinished requests and idle connections in lean_bounds.go; the calls
// themselves in lean_call.go.

// Bounds of a TransportLean connection.
const (
	// leanStreamWindow is the SETTINGS_INITIAL_WINDOW_SIZE advertised,
	// larger than a request may be, so that no stream needs a
	// WINDOW_UPDATE.
	leanStreamWindow = 1 << 20
	// leanConnWindow is the connection's receive window; the bytes of a
	// request are given back once the call has decoded it.
	leanConnWindow = 4 << 20
	// leanMaxHeaderList is the SETTINGS_MAX_HEADER_LIST_SIZE advertised
	// (the decoded size of a header block, as RFC 9113 counts it); a
	// header block's encoded bytes are bounded at twice that.
	leanMaxHeaderList = 16 << 10
	// leanMaxHeaderFrames bounds the frames of a header block (HEADERS
	// and its CONTINUATIONs), empty ones included.
	leanMaxHeaderFrames = 128
	// leanMaxPendingWrite is the most bytes a connection holds unwritten:
	// past it, the peer is not reading and is disconnected.
	leanMaxPendingWrite = 4 << 20
	// leanWriteTimeout bounds one write: a peer that reads none of it
	// meanwhile is disconnected, so that no writer (a worker) stays
	// blocked on it.
	leanWriteTimeout = 10 * time.Second
	// leanMaxControl is the most PING frames answered between two
	// requests received whole: past it, ENHANCE_YOUR_CALM.
	leanMaxControl = 10000
	// leanMaxBuffer is the largest response buffer a pooled stream keeps;
	// leanMaxInBuffer its largest request buffer (an unfinished request
	// is charged its buffer's capacity: see lean_bounds.go).
	leanMaxBuffer   = 64 << 10
	leanMaxInBuffer = 4 << 10
	// maxWindow is the largest flow-control window (RFC 9113 6.9.1).
	maxWindow = 1<<31 - 1
	// defaultWindow is HTTP/2's initial window, stream and connection.
	defaultWindow = 65535
	// leanGracefulLinger is how long a connection that has said GOAWAY
	// and finished its calls waits for the peer to close, after shutting
	// down its side, before closing.
	leanGracefulLinger = time.Second
)

// leanServer is TransportLean: connections, the workers that run calls,
// and graceful shutdown.
type leanServer struct {
	s       *Server
	tls     *tls.Config      // nil: cleartext
	budget  *budget          // the server's, for unfinished requests
	work    chan *leanStream // to an idle worker
	quit    chan struct{}    // closed once the server has stopped: workers end
	stop    chan struct{}    // closed once close begins: accept loops end
	workers sync.WaitGroup   // long-lived workers
	nwork   int              // long-lived workers started, under mu
	streams sync.Pool        // of *leanStream

	mu      sync.Mutex
	closing bool
	lns     map[net.Listener]struct{}
	conns   map[*leanConn]struct{}
	connsWG sync.WaitGroup
}

func newLeanServer(s *Server) *leanServer {
	l := &leanServer{s: s, tls: serverTLS(s.cfg.TLS), budget: s.budget,
		work: make(chan *leanStream), quit: make(chan struct{}), stop: make(chan struct{}),
		lns: map[net.Listener]struct{}{}, conns: map[*leanConn]struct{}{}}
	l.streams.New = func() any { return &leanStream{} }
	return l
}

// serve accepts connections on ln until close. With ServerConfig.MaxConns
// it holds a slot of sem per connection served, from before its Accept to
// the connection's end, as netutil.LimitListener does: past the limit, new
// connections wait in ln's backlog. With ServerConfig.TLS, a connection's
// handshake runs on its own goroutine (see leanConn.serve).
func (l *leanServer) serve(ln net.Listener) error {
	l.mu.Lock()
	if l.closing {
		l.mu.Unlock()
		ln.Close()
		return nil
	}
	l.lns[ln] = struct{}{}
	l.mu.Unlock()
	defer ln.Close()
	var sem chan struct{}
	release := func() {}
	if n := l.s.cfg.MaxConns; n > 0 {
		sem = make(chan struct{}, n)
		release = func() { <-sem }
	}
	var backoff time.Duration
	for {
		if sem != nil {
			select {
			case sem <- struct{}{}:
			case <-l.stop:
				return nil
			}
		}
		nc, err := ln.Accept()
		if err != nil {
			release()
			l.mu.Lock()
			closing := l.closing
			l.mu.Unlock()
			if closing {
				return nil
			}
			// A temporary error (out of file descriptors, say) is retried,
			// as net/http and grpc-go do.
			var te interface{ Temporary() bool }
			if errors.As(err, &te) && te.Temporary() {
				backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
				l.s.log.Warn("rls: accept", "err", err, "retry_in", backoff)
				time.Sleep(backoff)
				continue
			}
			return err
		}
		backoff = 0
		if l.tls != nil {
			nc = tls.Server(nc, l.tls)
		}
		l.mu.Lock()
		if l.closing {
			l.mu.Unlock()
			nc.Close()
			release()
			return nil
		}
		c := newLeanConn(l, nc)
		c.release = release
		l.conns[c] = struct{}{}
		l.connsWG.Add(1)
		l.mu.Unlock()
		go c.serve()
	}
}

// close stops accepting, says GOAWAY on every connection, lets calls in
// flight finish until ctx ends, then closes the connections.
func (l *leanServer) close(ctx context.Context) {
	l.mu.Lock()
	l.closing = true
	close(l.stop)
	for ln := range l.lns {
		ln.Close()
	}
	conns := make([]*leanConn, 0, len(l.conns))
	for c := range l.conns {
		conns = append(conns, c)
	}
	l.mu.Unlock()
	for _, c := range conns {
		c.goAway()
	}
	done := make(chan struct{})
	go func() { l.connsWG.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		l.mu.Lock()
		for c := range l.conns {
			c.closeNet()
		}
		l.mu.Unlock()
		<-done
	}
	close(l.quit)
}
