package client

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sluicehq/sluice/node/api"
)

// Config configures a Client. The zero value of each field but Nodes means
// the default given in its comment.
type Config struct {
	// Nodes are nodes' addresses, "host:port", "http://host:port" or
	// "https://host:port" (as LimiterConfig.Nodes), asked in order for the
	// member list until one answers; the Client learns the other nodes
	// from it. At least one is required. A node given as https:// makes
	// the Client speak HTTPS (TLS, or the system roots when TLS is nil),
	// one given as http:// plain HTTP; every node must say the same.
	Nodes []string
	// Seeds is the former name of Nodes, still read when Nodes is empty.
	//
	// Deprecated: use Nodes (the same field in Config and LimiterConfig).
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
	// run with sluiced -tls-cert), verifying them with this config (a
	// cluster CA in RootCAs). Nodes are reached at the HTTP addresses they
	// advertise (IP:port), so their certificates need IP SANs. Nil speaks
	// plain HTTP, unless the nodes are given as https://.
	TLS *tls.Config
	// Logger receives the Client's warnings: a token (AdminToken) sent
	// over plain HTTP to a node that is not on loopback, once per
	// address. Nil means slog.Default().
	Logger *slog.Logger

	// tokenHint names the token to check when a node refuses it, or
	// that a warning says travels in clear: the admin token by default,
	// the client token for a Limiter's Client.
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

// withDefaults validates c and fills in the defaults: Nodes become
// host:port (Seeds when Nodes is empty), and TLS is set for https://.
func (c Config) withDefaults() (Config, error) {
	field := "Nodes"
	if len(c.Nodes) == 0 {
		c.Nodes, field = c.Seeds, "Seeds"
	}
	if len(c.Nodes) == 0 {
		return c, configError("Nodes", "at least one node address is required")
	}
	addrs, https, err := nodeAddrs(field, c.Nodes, c.TLS != nil)
	if err != nil {
		return c, err
	}
	if https && c.TLS == nil {
		c.TLS = &tls.Config{MinVersion: tls.VersionTLS12}
	}
	c.Nodes, c.Seeds = addrs, nil
	if c.Logger == nil {
		c.Logger = slog.Default()
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
	if c.tokenHint == "" {
		c.tokenHint = adminTokenHint
	}
	return c, nil
}

// nodeAddrs reads the nodes' addresses of field (Nodes, Seeds):
// "host:port", "http://host:port" or "https://host:port", all of one
// scheme (a bare host:port is https when tls is set), and returns them as
// host:port and whether they speak HTTPS.
func nodeAddrs(field string, nodes []string, tls bool) (addrs []string, https bool, err error) {
	addrs = make([]string, len(nodes))
	scheme := ""
	for i, n := range nodes {
		f := field + "[" + strconv.Itoa(i) + "]"
		s := "host"
		if rest, ok := strings.CutPrefix(n, "https://"); ok {
			s, n = "https", rest
		} else if rest, ok := strings.CutPrefix(n, "http://"); ok {
			s, n = "http", rest
		}
		n = strings.TrimSuffix(n, "/")
		if _, port, err := net.SplitHostPort(n); err != nil || port == "" {
			return nil, false, configError(f, strconv.Quote(nodes[i])+" is not host:port, http://host:port or https://host:port")
		}
		if s == "http" && tls {
			return nil, false, configError(f, strconv.Quote(nodes[i])+" is plain http://, but TLS is set: give the nodes as https:// (or host:port)")
		}
		if s == "host" {
			s = "http"
			if tls {
				s = "https"
			}
		}
		if scheme != "" && s != scheme {
			return nil, false, configError(f, strconv.Quote(nodes[i])+" is "+s+"://, another node is "+scheme+"://: the nodes speak one scheme")
		}
		scheme, addrs[i] = s, n
	}
	return addrs, scheme == "https", nil
}

// plainWarner warns, once per address, that a token would travel over
// plain HTTP to an address that is not loopback: anyone on the path can
// read it, and use it.
type plainWarner struct {
	log    *slog.Logger
	token  string // what the token is (Config.tokenHint)
	warned sync.Map
}

// check warns about addr (host:port) unless it is loopback or warned of.
func (w *plainWarner) check(addr string) {
	if isLoopback(addr) {
		return
	}
	if _, done := w.warned.LoadOrStore(addr, true); done {
		return
	}
	w.log.Warn("sluice: "+w.token+" is sent over plain http:// to a node that is not on loopback: anyone on the path can read it; "+
		"serve the nodes over TLS (sluiced -tls-cert) and give them as https://", "node", addr)
}

// isLoopback reports whether addr's host is a loopback IP or "localhost".
func isLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		host = addr
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.IsLoopback()
}
