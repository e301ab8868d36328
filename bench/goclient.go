package bench

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/node/api"
	"github.com/sluicehq/sluice/node/client"
)

// GoClientConfig configures the owner-aware Go client driver, which sends
// each check straight to its owner with node/client (one /v1/check per
// check when a session asks for one key, one /v1/checks per owner for a
// batch).
type GoClientConfig struct {
	// Nodes are HTTP addresses of nodes; the client learns the rest from
	// /v1/members.
	Nodes []string
	// Timeout bounds each request; 0 means 2s.
	Timeout time.Duration
	// Rule is the rule name of every check; "" means "bench".
	Rule string
	// Hits per check; 0 means 1.
	Hits int64
	// Keys is the key table (KeyConfig.KeyNames).
	Keys [][]byte
}

type goClientDriver struct {
	cfg  GoClientConfig
	c    *client.Client
	keys []string
}

// NewGoClientDriver connects a node/client Client to cfg.Nodes.
func NewGoClientDriver(cfg GoClientConfig) (Driver, error) {
	if err := clientDefaults(cfg.Keys, &cfg.Rule, &cfg.Hits, &cfg.Timeout); err != nil {
		return nil, err
	}
	ccfg := client.DefaultConfig()
	ccfg.Nodes = cfg.Nodes
	ccfg.Timeout = cfg.Timeout
	c, err := client.New(ccfg)
	if err != nil {
		return nil, fmt.Errorf("cannot start the Go client: %w", err)
	}
	d := &goClientDriver{cfg: cfg, c: c, keys: make([]string, len(cfg.Keys))}
	for i, k := range cfg.Keys {
		d.keys[i] = string(k)
	}
	return d, nil
}

func (d *goClientDriver) Name() string { return "go-client" }
func (d *goClientDriver) Close() error { return d.c.Close() }

func (d *goClientDriver) NewSession() (Session, error) { return &goClientSession{d: d}, nil }

type goClientSession struct {
	d       *goClientDriver
	checks  []api.CheckRequest
	results []api.CheckResult
}

func (s *goClientSession) Do(keys []int32, out []Outcome) error {
	d := s.d
	ctx, cancel := context.WithTimeout(context.Background(), d.cfg.Timeout)
	defer cancel()
	if len(keys) == 1 {
		r, err := d.c.Check(ctx, d.cfg.Rule, d.keys[keys[0]], d.cfg.Hits)
		if err != nil {
			out[0] = Failed
			return err
		}
		out[0] = outcomeOf(&r)
		return nil
	}
	s.checks = s.checks[:0]
	for _, k := range keys {
		s.checks = append(s.checks, api.CheckRequest{Rule: d.cfg.Rule, Key: d.keys[k], Hits: d.cfg.Hits, HitsSet: true})
	}
	if cap(s.results) < len(keys) {
		s.results = make([]api.CheckResult, len(keys))
	}
	s.results = s.results[:len(keys)]
	if err := d.c.CheckMany(ctx, s.checks, s.results); err != nil {
		for i := range out[:len(keys)] {
			out[i] = Failed
		}
		return err
	}
	for i := range s.results {
		out[i] = outcomeOf(&s.results[i])
	}
	return nil
}

// outcomeOf reads one decoded answer.
func outcomeOf(r *api.CheckResult) Outcome {
	o := Denied
	switch {
	case r.Error != "":
		return Failed
	case r.Allowed:
		o = Allowed
	}
	if r.Degraded {
		o = o.degrade()
	}
	return o
}

// clientDefaults checks and fills the fields the drivers built on
// node/client share: a key table, the rule ("bench"), hits per check (1)
// and the call timeout (2s).
func clientDefaults(keys [][]byte, rule *string, hits *int64, timeout *time.Duration) error {
	if len(keys) == 0 {
		return errors.New("keys: empty key table")
	}
	if *rule == "" {
		*rule = "bench"
	}
	if *hits == 0 {
		*hits = 1
	}
	if *hits < 0 {
		return fmt.Errorf("hits: must be ≥ 0, got %d", *hits)
	}
	if *timeout == 0 {
		*timeout = 2 * time.Second
	}
	return nil
}
