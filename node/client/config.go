package client

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/sluicehq/sluice/node/api"
)

// Config configures a Client. The zero value of each field but Seeds means
// the default given in its comment.
type Config struct {
	// Seeds are HTTP addresses "host:port" of nodes, asked in order for the
	// member list until one answers. At least one is required.
	Seeds []string
	// Timeout bounds each HTTP request (a context deadline, when sooner,
	// wins). Zero means 100ms: a node answers in well under a millisecond,
	// so a node still silent after 100ms is marked down (later requests
	// go elsewhere). The timed-out request itself returns its error: the
	// node may have decided it.
	Timeout time.Duration
	// RefreshInterval is how often the member list is fetched again. Zero
	// means 5s: membership changes are rare, and failures trigger an early
	// refresh anyway.
	RefreshInterval time.Duration
	// DownBackoff is how long a node whose request failed at the transport
	// level gets no requests. Zero means 1s: long enough not to pay a
	// timeout on every check while a node is dead, short enough to return
	// quickly to a node that restarted.
	DownBackoff time.Duration
	// MaxAttempts bounds the nodes one request is sent to (the first
	// choice plus fallbacks). Zero means 3.
	MaxAttempts int
	// MaxConnsPerHost bounds the keep-alive connections to each node. Zero
	// means 512 (fasthttp's default).
	MaxConnsPerHost int
	// BatchWindow, when positive, makes Check wait up to this long for
	// other checks to the same node and send them together as one
	// POST /v1/checks: fewer, larger requests for many concurrent callers,
	// at the cost of up to BatchWindow of latency. Zero means no batching
	// (each Check is one POST /v1/check). 200µs, the nodes' own forwarding
	// window, is a good value under heavy load.
	BatchWindow time.Duration
	// BatchSize sends a batch as soon as it holds this many checks. Zero
	// means 256, the nodes' forwarding batch; at most api.MaxBatch.
	BatchSize int
	// AdminToken is sent as "Authorization: Bearer <AdminToken>" with
	// GET /v1/members, an admin endpoint: the nodes' SLUICE_ADMIN_TOKEN.
	// Empty sends none, which nodes accept only from loopback when they
	// have no token themselves (a client on another host then gets 403
	// and cannot learn the members).
	AdminToken string
	// TLS, when not nil, makes the Client speak HTTPS to the nodes (they
	// run with sluiced -tls-cert), verifying them with this config. Nodes
	// are reached at the HTTP addresses they advertise (IP:port), so
	// their certificates need IP SANs. Nil speaks plain HTTP.
	TLS *tls.Config

	// tokenHint names the token to check when a node refuses it: the
	// admin token by default, the client token for a Limiter's Client.
	tokenHint string
}

// DefaultConfig returns the defaults described on each Config field, with
// no seeds.
func DefaultConfig() Config {
	return Config{
		Timeout:         100 * time.Millisecond,
		RefreshInterval: 5 * time.Second,
		DownBackoff:     time.Second,
		MaxAttempts:     3,
		MaxConnsPerHost: 512,
		BatchSize:       256,
	}
}

// ErrConfig means a Config field is invalid; the error names the field.
var ErrConfig = errors.New("invalid client config")

func configError(field, msg string) error {
	return fmt.Errorf("%w: %s: %s", ErrConfig, field, msg)
}

// withDefaults validates c and fills in the defaults.
func (c Config) withDefaults() (Config, error) {
	if len(c.Seeds) == 0 {
		return c, configError("Seeds", "at least one node address is required")
	}
	for i, s := range c.Seeds {
		if _, port, err := net.SplitHostPort(s); err != nil || port == "" {
			return c, configError("Seeds["+strconv.Itoa(i)+"]", strconv.Quote(s)+" is not host:port")
		}
	}
	d := DefaultConfig()
	durations := []struct {
		name string
		v    *time.Duration
		def  time.Duration
	}{
		{"Timeout", &c.Timeout, d.Timeout},
		{"RefreshInterval", &c.RefreshInterval, d.RefreshInterval},
		{"BatchWindow", &c.BatchWindow, 0},
		{"DownBackoff", &c.DownBackoff, d.DownBackoff},
	}
	for _, f := range durations {
		switch {
		case *f.v < 0:
			return c, configError(f.name, "must not be negative")
		case *f.v == 0:
			*f.v = f.def
		}
	}
	ints := []struct {
		name string
		v    *int
		def  int
	}{
		{"MaxAttempts", &c.MaxAttempts, d.MaxAttempts},
		{"MaxConnsPerHost", &c.MaxConnsPerHost, d.MaxConnsPerHost},
		{"BatchSize", &c.BatchSize, d.BatchSize},
	}
	for _, f := range ints {
		switch {
		case *f.v < 0:
			return c, configError(f.name, "must not be negative")
		case *f.v == 0:
			*f.v = f.def
		}
	}
	if c.BatchSize > api.MaxBatch {
		return c, configError("BatchSize", "at most "+strconv.Itoa(api.MaxBatch))
	}
	c.Seeds = append([]string(nil), c.Seeds...)
	if c.tokenHint == "" {
		c.tokenHint = adminTokenHint
	}
	return c, nil
}
