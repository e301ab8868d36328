package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/node/client"
)

// GatewayConfig configures the gateway driver, which decides every check
// in its own process with a node/client Limiter: it leases tokens from
// the nodes through the lease protocol and asks them nothing per check.
type GatewayConfig struct {
	// Nodes are the nodes' addresses (host:port or http://host:port).
	Nodes []string
	// Token is the nodes' client token (sluiced -client-token).
	Token string
	// Timeout bounds each request to a node; 0 means 2s.
	Timeout time.Duration
	// Rule is the rule name of every check; "" means "bench".
	Rule string
	// Hits per check; 0 means 1.
	Hits int64
	// Keys is the key table (KeyConfig.KeyNames).
	Keys [][]byte
}

type gatewayDriver struct {
	cfg  GatewayConfig
	l    *client.Limiter
	keys []string
}

// NewGatewayDriver starts a Limiter on cfg.Nodes.
func NewGatewayDriver(cfg GatewayConfig) (Driver, error) {
	if err := clientDefaults(cfg.Keys, &cfg.Rule, &cfg.Hits, &cfg.Timeout); err != nil {
		return nil, err
	}
	l, err := client.NewLimiter(client.LimiterConfig{Nodes: cfg.Nodes, Token: cfg.Token, Timeout: cfg.Timeout})
	if err != nil {
		return nil, fmt.Errorf("cannot start the Limiter: %w", err)
	}
	d := &gatewayDriver{cfg: cfg, l: l, keys: make([]string, len(cfg.Keys))}
	for i, k := range cfg.Keys {
		d.keys[i] = string(k)
	}
	return d, nil
}

func (d *gatewayDriver) Name() string { return "gateway" }

// Close returns what the Limiter holds.
func (d *gatewayDriver) Close() error { return d.l.Close() }

func (d *gatewayDriver) NewSession() (Session, error) { return d, nil } // stateless: safe to share

// Do decides each key with Limiter.Allow (a batch is that many calls).
func (d *gatewayDriver) Do(keys []int32, out []Outcome) error {
	var firstErr error
	for i, k := range keys {
		dec, err := d.l.Allow(context.Background(), d.cfg.Rule, d.keys[k], d.cfg.Hits)
		if err != nil {
			out[i] = Failed
			if firstErr == nil {
				firstErr = err
			}
			continue
		}
		o := Denied
		if dec.Allowed {
			o = Allowed
		}
		if dec.Degraded {
			o = o.degrade()
		}
		out[i] = o
	}
	if firstErr != nil && len(keys) == 1 {
		return firstErr // a batch's failed checks are counted per item
	}
	return nil
}
