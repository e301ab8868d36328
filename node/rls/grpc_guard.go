package rls

import (
	"context"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/tap"
)

// TransportGRPC: grpc-go's server, given TransportLean's bounds through
// grpc-go's own options and hooks (not a fork of it):
//
//   - options: MaxConcurrentStreams, the handshake's timeout,
//     MaxConnectionIdle, and static 64 KiB stream windows (no BDP
//     growth);
//   - its TransportCredentials (grpcGuard, grpc_conn.go): TLS with
//     grpc-go's own credentials (which refuse a client without ALPN h2),
//     then a guardConn that follows the frame headers the client sends:
//     it closes a connection past maxSettings SETTINGS parameters between
//     two requests received whole (grpc-go queues each SETTINGS for its
//     writer, which walks every stream for each larger
//     SETTINGS_INITIAL_WINDOW_SIZE), and charges the bytes of unfinished
//     requests as lean does (grpcStreamCost a stream, plus its DATA),
//     closing a connection whose charge the server's budget cannot take
//     (grpc-go gives no way to reset one of its streams from outside but
//     the one below);
//   - its InTapHandle (grpcGuard.tap): each stream's context is the
//     guard's to cancel (grpc-go then answers CANCELLED, resets the stream
//     and frees its buffers), which it does when the request has not
//     arrived whole within RequestTimeout; the tap also closes a
//     connection that has had no call in flight and no request received
//     whole for IdleTimeout when it opens a stream (MaxConnectionIdle
//     counts any stream as activity);
//   - the service's handlers, wrapped (grpcGuard.wrap): a request has
//     arrived whole once its handler's decode returns (grpc-go's returns
//     once END_STREAM has come).

const (
	// grpcStreamWindow is TransportGRPC's stream window, static.
	grpcStreamWindow = 64 << 10
	// grpcStreamCost is what an unfinished request is charged on
	// TransportGRPC beyond its DATA: its stream, the goroutine of its
	// handler (which waits for the request), their contexts.
	grpcStreamCost = 8 << 10
)

// newGRPCServer is TransportGRPC's server and its guard.
func newGRPCServer(s *Server) (*grpc.Server, *grpcGuard) {
	cfg := s.cfg
	g := &grpcGuard{s: s}
	if c := serverTLS(cfg.TLS); c != nil {
		g.tls = credentials.NewTLS(c)
	}
	g.mu.conns = map[*guardConn]struct{}{}
	srv := grpc.NewServer(grpc.MaxRecvMsgSize(maxRecvMsgSize), grpc.ForceServerCodecV2(newCodec()),
		// Calls run on long-lived goroutines (up to this many at a time;
		// more get one each): a goroutine per call grew its stack on every
		// call, a fifth of the server's CPU.
		grpc.NumStreamWorkers(streamWorkers),
		// A connection that has not finished its handshake by then is
		// closed (grpc-go's default is 120 s, and its Stop waits for such
		// connections: a silent client held up Close that long).
		grpc.ConnectionTimeout(handshakeTimeout),
		// MaxConnectionIdle 0 is grpc-go's "never".
		grpc.KeepaliveParams(keepalive.ServerParameters{MaxConnectionIdle: max(cfg.IdleTimeout, 0)}),
		grpc.MaxConcurrentStreams(maxConcurrentStreams),
		grpc.StaticStreamWindowSize(grpcStreamWindow),
		grpc.Creds(g),
		grpc.InTapHandle(g.tap),
		grpc.UnknownServiceHandler(g.unknown))
	srv.RegisterService(g.wrap(&serviceDesc), s)
	srv.RegisterService(g.wrap(&healthpb.Health_ServiceDesc), s.health)
	return srv, g
}

// grpcGuard is TransportGRPC's TransportCredentials, tap and handler
// wrapper. It is safe for concurrent use.
type grpcGuard struct {
	s   *Server
	tls credentials.TransportCredentials // nil: cleartext

	mu struct {
		sync.Mutex
		unfinished fifo[*grpcPending]      // in the order their HEADERS came
		conns      map[*guardConn]struct{} // open
		deadline   func() bool             // stops the armed deadline timer; nil: none
		closed     bool
	}
}

// grpcPending is a stream's context, which the guard may cancel, and its
// place among the unfinished requests.
type grpcPending struct {
	context.Context
	cancel context.CancelFunc
	conn   *guardConn // nil if the connection is not the guard's
	start  time.Time
	queue  fifoLinks[*grpcPending] // under grpcGuard.mu
	// The handler goroutine's: received has run; the request arrived
	// whole (a call in flight on conn).
	left, called bool
}

func (p *grpcPending) links() *fifoLinks[*grpcPending] { return &p.queue }

type pendingKey struct{}

func (p *grpcPending) Value(key any) any {
	if key == (pendingKey{}) {
		return p
	}
	return p.Context.Value(key)
}

func pendingOf(ctx context.Context) *grpcPending {
	p, _ := ctx.Value(pendingKey{}).(*grpcPending)
	return p
}

// tap, grpc-go's InTapHandle (run on the connection's reader, under its
// lock), makes a new stream an unfinished request; it closes a connection
// idle but for unfinished requests.
func (g *grpcGuard) tap(ctx context.Context, _ *tap.Info) (context.Context, error) {
	var gc *guardConn
	if pr, ok := peer.FromContext(ctx); ok {
		if gi, ok := pr.AuthInfo.(guardInfo); ok {
			gc = gi.conn
		}
	}
	if gc != nil && gc.idle(g.s.cfg.IdleTimeout) {
		gc.abort()
		return nil, status.Error(codes.Unavailable, "the connection has been idle for "+g.s.cfg.IdleTimeout.String())
	}
	cctx, cancel := context.WithCancel(ctx)
	p := &grpcPending{Context: cctx, cancel: cancel, conn: gc, start: g.s.cfg.Now()}
	g.mu.Lock()
	// Streams that grpc-go ended without a handler (a malformed method
	// name, say) leave the front as they come to it.
	for old := g.mu.unfinished.front(); old != nil && old.Err() != nil; old = g.mu.unfinished.front() {
		g.mu.unfinished.remove(old)
	}
	g.mu.unfinished.push(p)
	g.armLocked()
	g.mu.Unlock()
	return p, nil
}

// received notes that p's request is no longer unfinished: it has
// arrived whole (ok: a call is in flight on its connection), or it never
// will (cancelled, or answered unread). Called on the handler's
// goroutine.
func (g *grpcGuard) received(p *grpcPending, ok bool) {
	if p == nil {
		return
	}
	if !p.left {
		p.left = true
		g.mu.Lock()
		g.mu.unfinished.remove(p)
		g.mu.Unlock()
	}
	if ok && !p.called && p.conn != nil {
		p.called = true
		p.conn.calls.Add(1)
		p.conn.touch()
	}
}

// done notes that p's call has ended.
func (g *grpcGuard) done(p *grpcPending) {
	if p == nil {
		return
	}
	g.received(p, false)
	if p.called {
		p.conn.calls.Add(-1)
		p.conn.touch()
	}
}

// armLocked arms the deadline timer for the oldest unfinished request,
// unless one is armed (for it, or an older one: that fires early and arms
// again).
func (g *grpcGuard) armLocked() {
	d := g.s.cfg.RequestTimeout
	p := g.mu.unfinished.front()
	if g.mu.deadline != nil || g.mu.closed || d <= 0 || p == nil {
		return
	}
	g.mu.deadline = g.s.cfg.AfterFunc(p.start.Add(d).Sub(g.s.cfg.Now()), g.expire)
}

// expire, the deadline timer's, cancels the unfinished requests older than
// RequestTimeout, and takes back the connections' charges of requests
// begun before then (which grpc-go has reset: the guardConns did not see
// them end).
func (g *grpcGuard) expire() {
	d := g.s.cfg.RequestTimeout
	now := g.s.cfg.Now()
	var late []*grpcPending
	g.mu.Lock()
	g.mu.deadline = nil
	for p := g.mu.unfinished.front(); p != nil && !now.Before(p.start.Add(d)); p = g.mu.unfinished.front() {
		g.mu.unfinished.remove(p)
		late = append(late, p)
	}
	conns := make([]*guardConn, 0, len(g.mu.conns))
	for c := range g.mu.conns {
		conns = append(conns, c)
	}
	g.armLocked()
	g.mu.Unlock()
	for _, c := range conns {
		c.expire(now.Add(-d))
	}
	for _, p := range late {
		if p.Err() == nil {
			p.cancel()
			g.s.budget.timeout.Inc()
		}
	}
}

// close stops the deadline timer, once the server has stopped.
func (g *grpcGuard) close() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.mu.closed = true
	if g.mu.deadline != nil {
		g.mu.deadline()
		g.mu.deadline = nil
	}
}

// wrap is sd with handlers that tell the guard when a request has arrived
// whole and when its call ends.
func (g *grpcGuard) wrap(sd *grpc.ServiceDesc) *grpc.ServiceDesc {
	w := *sd
	w.Methods = make([]grpc.MethodDesc, len(sd.Methods))
	for i, m := range sd.Methods {
		h := m.Handler
		m.Handler = func(srv any, ctx context.Context, dec func(any) error, ic grpc.UnaryServerInterceptor) (any, error) {
			p := pendingOf(ctx)
			defer g.done(p)
			return h(srv, ctx, func(m any) error {
				err := dec(m)
				g.received(p, err == nil)
				return err
			}, ic)
		}
		w.Methods[i] = m
	}
	w.Streams = make([]grpc.StreamDesc, len(sd.Streams))
	for i, st := range sd.Streams {
		h := st.Handler
		st.Handler = func(srv any, ss grpc.ServerStream) error {
			p := pendingOf(ss.Context())
			defer g.done(p)
			return h(srv, &receivedHook{ServerStream: ss, g: g, p: p})
		}
		w.Streams[i] = st
	}
	return &w
}

// receivedHook tells the guard when a streaming call's first message has
// arrived (for the health service's Watch, its request, read to its
// END_STREAM).
type receivedHook struct {
	grpc.ServerStream
	g *grpcGuard
	p *grpcPending
}

func (r *receivedHook) RecvMsg(m any) error {
	err := r.ServerStream.RecvMsg(m)
	r.g.received(r.p, err == nil)
	return err
}

// unknown answers a method the server does not serve UNIMPLEMENTED, as
// grpc-go does by itself, unread (as the guard's handler, it ends the
// request's unfinished state, without counting it as a call).
func (g *grpcGuard) unknown(_ any, ss grpc.ServerStream) error {
	g.done(pendingOf(ss.Context()))
	m, _ := grpc.MethodFromServerStream(ss)
	return status.Error(codes.Unimplemented, "unknown method "+m)
}
