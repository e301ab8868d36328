package bench

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// RLSConfig configures an Envoy rate limit service driver: each check is
// one ShouldRateLimit call with one descriptor of one entry, the way
// Envoy's rate limit filter calls (many calls in flight on few HTTP/2
// connections, a deadline on each).
type RLSConfig struct {
	// Addr is the service's host:port (sluiced -rls-listen).
	Addr string
	// Domain and Entry name the descriptor: {Entry: <key>} in Domain.
	// "" means "bench" and "user".
	Domain, Entry string
	// Conns is the number of HTTP/2 connections, calls spread over them
	// by session; 0 means 4.
	Conns int
	// Timeout is each call's deadline; 0 means 2s, as the other drivers'
	// (Envoy's rate limit filter sends 20ms by default: on a loaded
	// machine most calls would then fail, and a failed call is no
	// decision to count Redis's work against).
	Timeout time.Duration
	// Keys is the key table (KeyConfig.KeyNames): the entry's values.
	Keys [][]byte
}

type rlsDriver struct {
	cfg     RLSConfig
	conns   []*grpc.ClientConn
	clients []rlsv3.RateLimitServiceClient
	keys    []string
	next    atomic.Uint32
}

// NewRLSDriver dials cfg.Addr (lazily: the first call connects).
func NewRLSDriver(cfg RLSConfig) (Driver, error) {
	if cfg.Addr == "" {
		return nil, errors.New("rls: addr: required")
	}
	if len(cfg.Keys) == 0 {
		return nil, errors.New("rls: keys: required")
	}
	if cfg.Domain == "" {
		cfg.Domain = "bench"
	}
	if cfg.Entry == "" {
		cfg.Entry = "user"
	}
	if cfg.Conns <= 0 {
		cfg.Conns = 4
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 2 * time.Second
	}
	d := &rlsDriver{cfg: cfg, keys: make([]string, len(cfg.Keys))}
	for i, k := range cfg.Keys {
		d.keys[i] = string(k)
	}
	for range cfg.Conns {
		c, err := grpc.NewClient(cfg.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			_ = d.Close()
			return nil, fmt.Errorf("rls: %w", err)
		}
		d.conns = append(d.conns, c)
		d.clients = append(d.clients, rlsv3.NewRateLimitServiceClient(c))
	}
	return d, nil
}

func (d *rlsDriver) Name() string { return "rls" }

func (d *rlsDriver) Close() error {
	var first error
	for _, c := range d.conns {
		if err := c.Close(); err != nil && first == nil {
			first = err
		}
	}
	d.conns, d.clients = nil, nil
	return first
}

// NewSession returns a session calling on the next connection in turn.
func (d *rlsDriver) NewSession() (Session, error) {
	n := int(d.next.Add(1)-1) % len(d.clients)
	s := &rlsSession{d: d, c: d.clients[n]}
	s.entry = &ratelimitv3.RateLimitDescriptor_Entry{Key: d.cfg.Entry}
	s.req = &rlsv3.RateLimitRequest{Domain: d.cfg.Domain,
		Descriptors: []*ratelimitv3.RateLimitDescriptor{{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{s.entry}}}}
	return s, nil
}

type rlsSession struct {
	d     *rlsDriver
	c     rlsv3.RateLimitServiceClient
	req   *rlsv3.RateLimitRequest
	entry *ratelimitv3.RateLimitDescriptor_Entry
}

// Do makes one call per key (a batch is that many calls).
func (s *rlsSession) Do(keys []int32, out []Outcome) error {
	var firstErr error
	for i, k := range keys {
		s.entry.Value = s.d.keys[k]
		ctx, cancel := context.WithTimeout(context.Background(), s.d.cfg.Timeout)
		r, err := s.c.ShouldRateLimit(ctx, s.req)
		cancel()
		switch {
		case err != nil:
			out[i] = Failed
		case r.GetOverallCode() == rlsv3.RateLimitResponse_OK:
			out[i] = Allowed
		case r.GetOverallCode() == rlsv3.RateLimitResponse_OVER_LIMIT:
			out[i] = Denied
		default:
			out[i], err = Failed, fmt.Errorf("%w: overall code %v", ErrBadResponse, r.GetOverallCode())
		}
		if err != nil && firstErr == nil {
			firstErr = err
		}
	}
	return firstErr
}
