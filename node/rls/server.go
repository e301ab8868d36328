package rls

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/VictoriaMetrics/metrics"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"golang.org/x/net/netutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/sluicehq/sluice/lease"
	"github.com/sluicehq/sluice/node/engine"
	"github.com/sluicehq/sluice/node/rules"
)

// Engine is what the server needs from the node (node.Node implements it;
// cmd/sluiced passes it, so that this package imports no HTTP server):
// install the rules that count the configured limits next to the node's
// own, and decide batches of requests through the node's rules, leases and
// cluster routing (each descriptor is a request of its own: no
// descriptor's denial refunds another's).
type Engine interface {
	SetRLSRules(s *rules.Set)
	Decide(ctx context.Context, b *engine.Batch)
}

// Bounds on requests: a request past them is answered INVALID_ARGUMENT.
const (
	MaxDomainLen      = 256
	MaxDescriptors    = 64
	MaxEntries        = 32
	MaxEntryKeyLen    = 256
	MaxEntryValueLen  = 4096
	MaxHitsAddend     = 1 << 32
	maxRecvMsgSize    = 256 << 10
	maxDetailedSeries = 10000
	streamWorkers     = 128
)

// ServerConfig configures a Server. The zero value of each field means the
// default in its comment.
type ServerConfig struct {
	// Engine decides; required.
	Engine Engine
	// Metrics receives the per-descriptor metrics. Nil means a new set
	// (see Server.Metrics).
	Metrics *metrics.Set
	// Logger: nil means slog.Default().
	Logger *slog.Logger
	// ResponseHeaders adds the RateLimit headers of the most restrictive
	// status to response_headers_to_add (envoyproxy/ratelimit's
	// LIMIT_RESPONSE_HEADERS_ENABLED). False means none.
	ResponseHeaders bool
	// DynamicMetadata fills the response's dynamic_metadata as
	// envoyproxy/ratelimit's RESPONSE_DYNAMIC_METADATA does: the domain,
	// the descriptors, and the metadata of the matched limits not over
	// them. False means none.
	DynamicMetadata bool
	// NearLimitRatio is the share of a limit past which hits count as
	// near_limit. Zero means 0.8, envoyproxy/ratelimit's default.
	NearLimitRatio float64
	// Now is the clock of duration_until_reset (envoyproxy/ratelimit's
	// whole seconds to the end of the unit's window, on its own clock)
	// and, with AfterFunc, of RequestTimeout.
	// Nil means time.Now.
	Now func() time.Time
	// AfterFunc runs f once d has passed on Now's clock; stop cancels it.
	// Nil means time.AfterFunc.
	AfterFunc func(d time.Duration, f func()) (stop func() bool)
	// Transport is how the server speaks gRPC: "" means TransportLean.
	Transport Transport
	// MaxConns bounds the connections served at once from each listener
	// given to Serve: past it, a new connection waits in the listener's
	// accept backlog until a served one closes. Zero means
	// DefaultMaxConns; negative means no limit.
	MaxConns int
	// IdleTimeout closes a connection gracefully (GOAWAY, then close)
	// once it has had no call in flight and no request received whole for
	// this long (a request still arriving keeps no connection busy).
	// Zero means DefaultIdleTimeout; negative means never.
	IdleTimeout time.Duration
	// TLS, when set, is the TLS configuration of every connection (both
	// transports): ALPN h2 (a client that negotiates none is refused),
	// and the client certificate its ClientAuth and ClientCAs ask for.
	// Nil means cleartext HTTP/2 with prior knowledge.
	TLS *tls.Config
	// RequestTimeout bounds how long a request may take to arrive whole,
	// from its HEADERS to its END_STREAM: past it, its stream is reset
	// and its buffers freed. Zero means DefaultRequestTimeout; negative
	// means none.
	RequestTimeout time.Duration
	// MaxPendingBytes bounds the bytes held, across the server's
	// connections, by requests that have not arrived whole: past it, a
	// new one is refused (see the package doc, Transports). Zero means
	// DefaultMaxPendingBytes; negative means no bound.
	MaxPendingBytes int64
}

// The defaults of ServerConfig's connection bounds.
const (
	DefaultMaxConns    = 10000
	DefaultIdleTimeout = 5 * time.Minute
)

// Transport names a Server's gRPC transport: the HTTP/2 server that
// carries the service's calls.
type Transport string

const (
	// TransportGRPC is grpc-go's server.
	TransportGRPC Transport = "grpc"
	// TransportLean is Sluice's own HTTP/2 server for the service's unary
	// calls (ShouldRateLimit and the health service's Check).
	TransportLean Transport = "lean"
)

// Server is the Envoy rate limit service. It is safe for concurrent use;
// SetConfig may be called at any time (the configuration is swapped
// atomically; calls in flight finish with the one they started with).
type Server struct {
	cfg      ServerConfig
	log      *slog.Logger
	conf     atomic.Pointer[Config]
	grpc     *grpc.Server // TransportGRPC
	guard    *grpcGuard   // TransportGRPC's bounds
	lean     *leanServer  // TransportLean
	budget   *budget      // of unfinished requests
	health   *health.Server
	met      *statsSet
	states   sync.Pool // of *callState
	replies  sync.Pool // of *reply
	requests sync.Pool // of *request

	closeOnce sync.Once
}

// NewServer returns a Server with no configuration: until SetConfig every
// call is answered UNAVAILABLE and the health service says NOT_SERVING.
func NewServer(cfg ServerConfig) *Server {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Metrics == nil {
		cfg.Metrics = metrics.NewSet()
	}
	if cfg.NearLimitRatio <= 0 || cfg.NearLimitRatio > 1 {
		cfg.NearLimitRatio = 0.8
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.AfterFunc == nil {
		cfg.AfterFunc = func(d time.Duration, f func()) func() bool { return time.AfterFunc(d, f).Stop }
	}
	if cfg.MaxConns == 0 {
		cfg.MaxConns = DefaultMaxConns
	}
	if cfg.IdleTimeout == 0 {
		cfg.IdleTimeout = DefaultIdleTimeout
	}
	if cfg.RequestTimeout == 0 {
		cfg.RequestTimeout = DefaultRequestTimeout
	}
	if cfg.MaxPendingBytes == 0 {
		cfg.MaxPendingBytes = DefaultMaxPendingBytes
	}
	s := &Server{cfg: cfg, log: cfg.Logger, met: newStatsSet(cfg.Metrics), budget: newBudget(cfg.MaxPendingBytes, cfg.Metrics)}
	s.states.New = func() any { return &callState{} }
	s.replies.New = func() any { return &reply{pool: &s.replies} }
	s.requests.New = func() any { return &request{} }
	// The health service's statuses, which both transports serve.
	s.health = health.NewServer()
	s.health.SetServingStatus("", healthpb.HealthCheckResponse_NOT_SERVING)
	s.health.SetServingStatus(rlsv3.RateLimitService_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_NOT_SERVING)
	switch cfg.Transport {
	case TransportGRPC:
		s.grpc, s.guard = newGRPCServer(s)
	case "", TransportLean:
		s.lean = newLeanServer(s)
	}
	return s
}

// SetConfig installs c: its rules in the engine first, then c itself.
func (s *Server) SetConfig(c *Config) {
	s.cfg.Engine.SetRLSRules(c.Rules())
	s.conf.Store(c)
	s.health.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	s.health.SetServingStatus(rlsv3.RateLimitService_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_SERVING)
}

// Config returns the configuration in use, or nil.
func (s *Server) Config() *Config { return s.conf.Load() }

// Serve serves gRPC on ln until Close, when it returns nil. It closes ln.
// An unknown ServerConfig.Transport is an error.
func (s *Server) Serve(ln net.Listener) error {
	if s.lean != nil {
		// lean bounds its connections itself, as netutil.LimitListener
		// does (whose connections hide the TCP connection's CloseWrite,
		// which lean's graceful close needs).
		return s.lean.serve(ln)
	}
	if s.grpc == nil {
		ln.Close()
		return fmt.Errorf("rls: unknown transport %q (want %q or %q)", s.cfg.Transport, TransportLean, TransportGRPC)
	}
	if s.cfg.MaxConns > 0 {
		ln = netutil.LimitListener(ln, s.cfg.MaxConns)
	}
	err := s.grpc.Serve(ln)
	if errors.Is(err, grpc.ErrServerStopped) {
		return nil
	}
	return err
}

// Close stops serving: calls in flight may finish until ctx ends, then
// connections are closed. It is idempotent. On TransportGRPC a connection
// still in its handshake (TLS, preface) holds it up to 10 s past ctx
// (grpc-go's Stop waits for it; the handshake's own timeout ends it).
func (s *Server) Close(ctx context.Context) {
	s.closeOnce.Do(func() {
		s.health.Shutdown()
		if s.lean != nil {
			s.lean.close(ctx)
			return
		}
		if s.grpc == nil {
			return
		}
		defer s.guard.close()
		done := make(chan struct{})
		go func() { s.grpc.GracefulStop(); close(done) }()
		select {
		case <-done:
		case <-ctx.Done():
			s.grpc.Stop()
			<-done
		}
	})
}

// callState is the scratch space of one call, pooled.
type callState struct {
	limits  []*Limit
	entries []*entry // the matched entry of each descriptor
	hows    []uint32 // how each descriptor's entries matched (see match)
	hits    []int64
	req     []int // per descriptor: its request in batch, -1 when none
	batch   engine.Batch
	drain   engine.Batch
	key     []byte // appendKey's buffer
	kv      []byte // match's buffer
}

func (s *Server) getState(n int) *callState {
	st := s.states.Get().(*callState)
	st.limits = growClear(st.limits, n)
	st.entries = growClear(st.entries, n)
	st.hows = growClear(st.hows, n)
	st.hits = growClear(st.hits, n)
	st.req = growClear(st.req, n)
	st.batch.Reset()
	st.drain.Reset()
	return st
}

func (s *Server) putState(st *callState) {
	st.batch.Reset()
	st.drain.Reset()
	s.states.Put(st)
}

func growClear[T any](v []T, n int) []T {
	if cap(v) < n {
		return make([]T, n)
	}
	v = v[:n]
	clear(v)
	return v
}

// ShouldRateLimit answers one request: a status per descriptor, in order,
// and OVER_LIMIT overall when any descriptor is over its limit.
func (s *Server) ShouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	r := &reply{}
	if err := s.answer(ctx, req, r); err != nil {
		return nil, err
	}
	return &r.resp, nil
}

// shouldRateLimitPooled is ShouldRateLimit answering with a pooled reply,
// which the codec releases once sent.
func (s *Server) shouldRateLimitPooled(ctx context.Context, req *rlsv3.RateLimitRequest) (*reply, error) {
	r := s.replies.Get().(*reply)
	if err := s.answer(ctx, req, r); err != nil {
		r.release()
		return nil, err
	}
	return r, nil
}

// answer fills r with the answer to req and counts the call.
func (s *Server) answer(ctx context.Context, req *rlsv3.RateLimitRequest, r *reply) error {
	err := s.shouldRateLimit(ctx, req, r)
	if err != nil {
		switch status.Code(err) {
		case codes.InvalidArgument:
			s.met.countCall("INVALID_ARGUMENT")
		case codes.Unavailable:
			s.met.countCall("UNAVAILABLE")
		default:
			s.met.countCall("INTERNAL")
		}
	} else {
		s.met.countCall(r.resp.OverallCode.String())
	}
	return err
}

func (s *Server) shouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest, r *reply) error {
	if err := validate(req); err != nil {
		return status.Error(codes.InvalidArgument, err.Error())
	}
	c := s.conf.Load()
	if c == nil {
		return status.Error(codes.Unavailable, "no rate limit configuration loaded")
	}
	top := c.domains[req.Domain]
	ds := req.Descriptors
	st := s.getState(len(ds))
	defer s.putState(st)
	reqHits := int64(req.HitsAddend)
	if reqHits == 0 {
		reqHits = 1
	}

	// Match each descriptor to its limit.
	var replaced map[string]bool
	for i, d := range ds {
		e, how := match(top, d, &st.kv)
		if e == nil || e.limit == nil {
			continue
		}
		st.entries[i], st.hows[i], st.limits[i] = e, how, e.limit
		for _, r := range e.limit.Replaces {
			if replaced == nil {
				replaced = map[string]bool{}
			}
			replaced[r] = true
		}
		st.hits[i] = reqHits
		if h := d.GetHitsAddend(); h != nil {
			st.hits[i] = int64(h.GetValue())
		}
	}
	// A limit named in another matched limit's replaces is not applied
	// (and not charged).
	for i, l := range st.limits {
		if l != nil && l.Name != "" && replaced[l.Name] {
			st.limits[i] = nil
		}
	}

	// Decide the limits that count, each descriptor a request of its own.
	for i, l := range st.limits {
		st.req[i] = -1
		if l == nil || l.Rule == "" {
			continue
		}
		st.key = appendKey(st.key[:0], ds[i], st.entries[i], st.hows[i])
		st.batch.Add(l.Rule, string(st.key), st.hits[i])
		st.req[i] = st.batch.End()
	}
	if len(st.batch.Requests) > 0 {
		s.cfg.Engine.Decide(ctx, &st.batch)
		if err := s.drainDenied(ctx, st); err != nil {
			return err
		}
	}

	// Statuses in descriptor order.
	r.start(len(ds))
	resp := &r.resp
	var tightest *rlsv3.RateLimitResponse_DescriptorStatus
	var over, quotas, quotasOver int // descriptors over their limit: others, quota_mode ones
	now := s.cfg.Now().Unix()
	for i := range ds {
		l := st.limits[i]
		ss := resp.Statuses[i]
		if l == nil {
			continue
		}
		stats := s.met.of(l, st.entries[i], ds[i], st.hows[i])
		hits := st.hits[i]
		stats.totalHits.Add(int(hits))
		if l.Unlimited {
			ss.LimitRemaining = math.MaxUint32
			continue
		}
		cl := r.limit(i)
		cl.Name, cl.RequestsPerUnit, cl.Unit = l.Name, l.RequestsPerUnit, l.Unit
		r.setReset(i, envoyReset(now, l.Period))
		var denied bool
		if l.Rule == "" { // requests_per_unit 0
			denied = hits > 0
		} else {
			q := &st.batch.Requests[st.req[i]]
			if q.Err != nil {
				code := codes.Internal
				if fe := (*lease.FieldError)(nil); errors.As(q.Err, &fe) { // a key the engine refuses: an empty value, say
					code = codes.InvalidArgument
				}
				return status.Error(code, "cannot decide descriptors["+strconv.Itoa(i)+"]: "+q.Err.Error())
			}
			it := &st.batch.ItemsOf(st.req[i])[0]
			d := &it.Decision
			if d.Unavailable {
				return status.Error(codes.Unavailable, "the rate limit store is unavailable (descriptors["+strconv.Itoa(i)+"])")
			}
			denied = !d.Allowed
			if !denied {
				ss.LimitRemaining = uint32(min(max(d.Remaining, 0), math.MaxUint32))
				s.countNear(stats, l, d.Remaining, hits)
			}
			if !l.Algorithm.WindowReset() { // not envoy's window end (envoyReset): its own reset, in whole seconds
				r.setReset(i, (d.Reset+time.Second-1)/time.Second*time.Second)
			}
		}
		if l.Quota {
			quotas++
		}
		if denied {
			stats.overLimit.Add(int(hits))
			if l.Shadow {
				stats.shadowMode.Add(int(hits))
			} else {
				ss.Code = rlsv3.RateLimitResponse_OVER_LIMIT
				if l.Quota {
					quotasOver++
				} else {
					over++
				}
			}
		}
		if tightest == nil || ss.LimitRemaining < tightest.LimitRemaining {
			tightest = ss
		}
	}
	// OVER_LIMIT when a descriptor is over its limit, but quota_mode ones:
	// those only when all of the request's are (envoyproxy/ratelimit).
	if over > 0 || quotas > 0 && quotasOver == quotas {
		resp.OverallCode = rlsv3.RateLimitResponse_OVER_LIMIT
	}
	if s.cfg.ResponseHeaders && tightest != nil {
		resp.ResponseHeadersToAdd = rateLimitHeaders(tightest)
	}
	if s.cfg.DynamicMetadata {
		resp.DynamicMetadata = dynamicMetadata(req, resp, st.limits)
	}
	return nil
}

// drainDenied makes a denied descriptor count as envoyproxy/ratelimit
// counts it. There, every hit is added to the window's counter, allowed or
// not, so a request of 5 hits denied with 3 left leaves the window over its
// limit: every later request in the window is denied. Sluice charges
// nothing for a denial, so the 3 left are taken here; later requests are
// then denied too, as with envoy (fixed windows).
func (s *Server) drainDenied(ctx context.Context, st *callState) error {
	for qi := range st.batch.Requests {
		q := &st.batch.Requests[qi]
		if q.Err != nil {
			continue
		}
		it := &st.batch.ItemsOf(qi)[0]
		if it.Decided && !it.Decision.Allowed && !it.Decision.Unavailable && it.Decision.Remaining > 0 && it.Hits > it.Decision.Remaining {
			st.drain.Add(it.Rule, it.Key, it.Decision.Remaining)
			st.drain.End()
		}
	}
	if len(st.drain.Requests) > 0 {
		s.cfg.Engine.Decide(ctx, &st.drain)
	}
	return nil
}

// countNear adds to near_limit the hits of an allowed check past the near
// threshold, as envoyproxy/ratelimit does.
func (s *Server) countNear(stats *descStats, l *Limit, remaining, hits int64) {
	limit := int64(l.RequestsPerUnit)
	after := limit - max(remaining, 0)
	before := after - hits
	near := int64(math.Floor(float64(limit) * s.cfg.NearLimitRatio))
	if after > near {
		stats.nearLimit.Add(int(after - max(near, before)))
	}
}

// envoyReset is duration_until_reset at now (Unix seconds) for a limit
// of period, as envoyproxy/ratelimit computes it: the whole seconds to the
// end of the window (windows aligned on the Unix epoch; a month is 30
// days, a year 365), from 1 to the period.
func envoyReset(now int64, period time.Duration) time.Duration {
	p := int64(period / time.Second)
	if p <= 0 {
		return 0
	}
	return time.Duration(p-now%p) * time.Second
}

// validate refuses requests past the bounds, naming the field.
func validate(req *rlsv3.RateLimitRequest) error {
	switch {
	case req.GetDomain() == "":
		return errors.New("domain: required")
	case len(req.GetDomain()) > MaxDomainLen:
		return fmt.Errorf("domain: longer than %d bytes", MaxDomainLen)
	case len(req.GetDescriptors()) == 0:
		return errors.New("descriptors: at least one is required")
	case len(req.GetDescriptors()) > MaxDescriptors:
		return fmt.Errorf("descriptors: more than %d", MaxDescriptors)
	}
	for i, d := range req.GetDescriptors() {
		es := d.GetEntries()
		switch {
		case len(es) == 0:
			return fmt.Errorf("descriptors[%d].entries: at least one is required", i)
		case len(es) > MaxEntries:
			return fmt.Errorf("descriptors[%d].entries: more than %d", i, MaxEntries)
		}
		for k, e := range es {
			switch {
			case e.GetKey() == "":
				return fmt.Errorf("descriptors[%d].entries[%d].key: required", i, k)
			case len(e.GetKey()) > MaxEntryKeyLen:
				return fmt.Errorf("descriptors[%d].entries[%d].key: longer than %d bytes", i, k, MaxEntryKeyLen)
			case len(e.GetValue()) > MaxEntryValueLen:
				return fmt.Errorf("descriptors[%d].entries[%d].value: longer than %d bytes", i, k, MaxEntryValueLen)
			}
			// The key the value goes into must pass the engine's key
			// validation: checked here, before a long key's digest hides
			// part of it.
			if msg := engine.TextProblem(e.GetValue()); msg != "" {
				return fmt.Errorf("descriptors[%d].entries[%d].value: %s", i, k, msg)
			}
		}
		if h := d.GetHitsAddend(); h != nil && h.GetValue() > MaxHitsAddend {
			return fmt.Errorf("descriptors[%d].hits_addend: more than %d", i, uint64(MaxHitsAddend))
		}
	}
	return nil
}

// rateLimitHeaders are the headers of status s: envoyproxy/ratelimit's
// (RateLimit-Limit, RateLimit-Remaining, RateLimit-Reset) and Sluice's
// draft-ietf-httpapi-ratelimit-headers pair (RateLimit-Policy, RateLimit).
func rateLimitHeaders(s *rlsv3.RateLimitResponse_DescriptorStatus) []*corev3.HeaderValue {
	l := s.GetCurrentLimit()
	window := int64(unitPeriods[l.GetUnit()] / time.Second)
	reset := int64(math.Ceil(s.GetDurationUntilReset().AsDuration().Seconds()))
	name := l.GetName()
	if name == "" {
		name = "rls"
	}
	q := strconv.FormatUint(uint64(l.GetRequestsPerUnit()), 10)
	r := strconv.FormatUint(uint64(s.GetLimitRemaining()), 10)
	t := strconv.FormatInt(reset, 10)
	return []*corev3.HeaderValue{
		{Key: "RateLimit-Limit", Value: q},
		{Key: "RateLimit-Remaining", Value: r},
		{Key: "RateLimit-Reset", Value: t},
		{Key: "RateLimit-Policy", Value: strconv.Quote(name) + ";q=" + q + ";w=" + strconv.FormatInt(window, 10)},
		{Key: "RateLimit", Value: strconv.Quote(name) + ";r=" + r + ";t=" + t},
	}
}
