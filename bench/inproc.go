package bench

import (
	"errors"
	"fmt"

	"github.com/sluicehq/sluice/lease"
)

// InprocConfig configures the in-process driver, which calls a
// lease.Manager directly: the node's decision cost without HTTP.
type InprocConfig struct {
	// Manager decides; the caller owns it (and closes it).
	Manager *lease.Manager
	// Policy is the limit every key is checked against.
	Policy lease.Policy
	// Rule prefixes every counter key ("bench:" + key), as the node does;
	// "" means "bench".
	Rule string
	// Hits per check; 0 means 1.
	Hits int64
	// Keys is the key table (KeyConfig.KeyNames).
	Keys [][]byte
}

type inprocDriver struct {
	cfg  InprocConfig
	keys []string
}

// NewInprocDriver validates cfg and precomputes the counter keys.
func NewInprocDriver(cfg InprocConfig) (Driver, error) {
	if cfg.Manager == nil {
		return nil, errors.New("manager: required")
	}
	if err := cfg.Policy.Validate(); err != nil {
		return nil, fmt.Errorf("policy: %w", err)
	}
	if cfg.Policy.Algorithm.Acquired() {
		return nil, errors.New("policy: " + cfg.Policy.Algorithm.String() + " needs acquire/release, not checks")
	}
	if len(cfg.Keys) == 0 {
		return nil, errors.New("keys: empty key table")
	}
	if cfg.Rule == "" {
		cfg.Rule = "bench"
	}
	if cfg.Hits == 0 {
		cfg.Hits = 1
	}
	if cfg.Hits < 0 {
		return nil, fmt.Errorf("hits: must be ≥ 0, got %d", cfg.Hits)
	}
	d := &inprocDriver{cfg: cfg, keys: make([]string, len(cfg.Keys))}
	for i, k := range cfg.Keys {
		d.keys[i] = cfg.Rule + ":" + string(k)
	}
	return d, nil
}

func (d *inprocDriver) Name() string                 { return "inproc" }
func (d *inprocDriver) Close() error                 { return nil }
func (d *inprocDriver) NewSession() (Session, error) { return d, nil } // stateless: safe to share

func (d *inprocDriver) Do(keys []int32, out []Outcome) error {
	var firstErr error
	for i, k := range keys {
		dec, err := d.cfg.Manager.Take(d.keys[k], d.cfg.Policy, d.cfg.Hits)
		switch {
		case err != nil:
			out[i] = Failed
			if firstErr == nil {
				firstErr = err
			}
		case dec.Allowed:
			out[i] = Allowed
			if dec.Degraded {
				out[i] = AllowedDegraded
			}
		default:
			out[i] = Denied
			if dec.Degraded || dec.Unavailable {
				out[i] = DeniedDegraded
			}
		}
	}
	if firstErr != nil && len(keys) == 1 {
		return firstErr
	}
	return nil
}
