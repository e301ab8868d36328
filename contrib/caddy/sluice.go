// Package sluicecaddy is a Caddy HTTP handler, http.handlers.sluice, that
// rate-limits requests with Sluice and decides inside the Caddy process:
// it holds a client.Limiter, which leases tokens from the Sluice nodes and
// answers from what it holds, so that a request costs no round trip to a
// node while tokens are held.
//
// In a Caddyfile:
//
//	sluice {
//		nodes  https://10.0.0.1:8080 https://10.0.0.2:8080
//		tls_ca /etc/sluice/ca.pem
//		token  {env.SLUICE_CLIENT_TOKEN}
//		rule   per-key
//		key    {http.request.header.X-API-Key}
//	}
//
// A denied request is answered 429 with Retry-After and the RateLimit
// headers (RateLimit-Policy, RateLimit, X-RateLimit-*) in the form the
// nodes send them; an allowed one goes to the next handler with the same
// RateLimit headers on its response. See README.md beside this file.
package sluicecaddy

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"go.uber.org/zap"

	"github.com/sluicehq/sluice/node/api"
	"github.com/sluicehq/sluice/node/client"
)

func init() {
	caddy.RegisterModule(Handler{})
}

// The values of OnMissingKey.
const (
	MissingKeySkip = "skip"
	MissingKeyDeny = "deny"
)

// Handler is the http.handlers.sluice module. One Limiter serves a
// Handler: it is made in Provision and closed (returning the tokens it
// holds) in Cleanup, so a config reload starts a new one.
type Handler struct {
	// Nodes are the base URLs of Sluice nodes (at least one); the Limiter
	// learns the rest of the cluster from them. Placeholders known at
	// provision time ({env.*}) are replaced.
	Nodes []string `json:"nodes,omitempty"`
	// Token is the client token (SLUICE_CLIENT_TOKEN of the nodes):
	// it can lease and spend tokens, never administer. Placeholders known
	// at provision time are replaced, so {env.SLUICE_CLIENT_TOKEN} keeps
	// it out of the JSON config.
	Token string `json:"token,omitempty"`
	// Rule is the name of the node's rule that limits the requests.
	Rule string `json:"rule"`
	// Key is the counter key of a request, usually a placeholder such as
	// {http.request.header.X-API-Key}, replaced per request.
	Key string `json:"key"`
	// OnMissingKey says what happens to a request whose key is empty
	// once replaced: "skip" (the default: the request is not limited)
	// or "deny" (429, without Retry-After: waiting does not bring a key).
	OnMissingKey string `json:"on_missing_key,omitempty"`
	// TLSCA is a PEM file of the CA certificates the https:// nodes'
	// certificates chain to (the CA of sluiced -tls-cert, which -tls-ca
	// names on the nodes). Empty means the system roots. Placeholders
	// known at provision time are replaced.
	TLSCA string `json:"tls_ca,omitempty"`

	limiter *client.Limiter
	logger  *zap.Logger
}

// CaddyModule returns the Caddy module information.
func (Handler) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "http.handlers.sluice",
		New: func() caddy.Module { return new(Handler) },
	}
}

// Provision replaces the placeholders of Nodes and Token, and makes the
// Limiter.
func (h *Handler) Provision(ctx caddy.Context) error {
	h.logger = ctx.Logger()
	repl := caddy.NewReplacer()
	nodes := make([]string, 0, len(h.Nodes))
	for _, n := range h.Nodes {
		n, err := repl.ReplaceOrErr(n, true, true)
		if err != nil {
			return fmt.Errorf("sluice: nodes: %v", err)
		}
		nodes = append(nodes, n)
	}
	tok, err := repl.ReplaceOrErr(h.Token, true, true)
	if err != nil {
		return fmt.Errorf("sluice: token: %v", err)
	}
	if err := h.validate(nodes); err != nil {
		return err
	}
	cfg := client.LimiterConfig{Nodes: nodes, Token: tok, Logger: ctx.Slogger()}
	cfg.Lease.Logger = cfg.Logger
	if h.TLSCA != "" {
		path, err := repl.ReplaceOrErr(h.TLSCA, true, true)
		if err != nil {
			return fmt.Errorf("sluice: tls_ca: %v", err)
		}
		if cfg.TLS, err = caConfig(path); err != nil {
			return err
		}
	}
	l, err := client.NewLimiter(cfg)
	if err != nil {
		return fmt.Errorf("sluice: %w", err)
	}
	h.limiter = l
	return nil
}

// caConfig is the TLS config verifying the nodes against the CA
// certificates of the PEM file at path.
func caConfig(path string) (*tls.Config, error) {
	pem, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("sluice: tls_ca: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("sluice: tls_ca: %s holds no PEM certificate", path)
	}
	return &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}, nil
}

// validate checks the fields, with nodes as given or replaced.
func (h *Handler) validate(nodes []string) error {
	if len(nodes) == 0 {
		return errors.New("sluice: nodes: at least one node URL is required")
	}
	scheme := ""
	for _, n := range nodes {
		if strings.Contains(n, "{") {
			continue // a placeholder: checked once replaced
		}
		s, _, ok := strings.Cut(n, "://")
		if !ok || (s != "http" && s != "https") {
			return fmt.Errorf("sluice: nodes: %q is not an http:// or https:// URL", n)
		}
		if scheme != "" && s != scheme {
			return fmt.Errorf("sluice: nodes: %q is %s://, another node is %s://: give every node one scheme", n, s, scheme)
		}
		scheme = s
	}
	if h.TLSCA != "" && scheme == "http" {
		return errors.New("sluice: tls_ca: the nodes are http://: give them as https:// (tls_ca verifies their certificates)")
	}
	if !api.ValidName(h.Rule) {
		return fmt.Errorf("sluice: rule: %q is not a rule name (1-%d bytes of A-Z a-z 0-9 _ . -)", h.Rule, api.MaxRuleNameLen)
	}
	if h.Key == "" {
		return errors.New("sluice: key: required (for example {http.request.header.X-API-Key})")
	}
	switch h.OnMissingKey {
	case "", MissingKeySkip, MissingKeyDeny:
	default:
		return fmt.Errorf("sluice: on_missing_key: %q is neither %s nor %s", h.OnMissingKey, MissingKeySkip, MissingKeyDeny)
	}
	return nil
}

// Cleanup closes the Limiter, which returns the tokens it holds.
func (h *Handler) Cleanup() error {
	if h.limiter == nil {
		return nil
	}
	err := h.limiter.Close()
	h.limiter = nil
	return err
}

// ServeHTTP decides the request with the Limiter: 429 when denied, else
// the next handler.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request, next caddyhttp.Handler) error {
	repl, _ := r.Context().Value(caddy.ReplacerCtxKey).(*caddy.Replacer)
	key := h.Key
	if repl != nil {
		key = repl.ReplaceAll(h.Key, "")
	}
	if key == "" {
		if h.OnMissingKey == MissingKeyDeny {
			w.Header().Set("X-Sluice-Missing-Key", h.Key)
			w.WriteHeader(http.StatusTooManyRequests)
			return nil
		}
		return next.ServeHTTP(w, r)
	}
	d, err := h.limiter.Allow(r.Context(), h.Rule, key, 1)
	if err != nil {
		if errors.Is(err, api.ErrInvalid) { // the request's key is out of bounds
			return caddyhttp.Error(http.StatusBadRequest, err)
		}
		return caddyhttp.Error(http.StatusServiceUnavailable, err)
	}
	h.limiter.WriteHeaders(w.Header(), h.Rule, key, &d)
	if !d.Allowed {
		w.WriteHeader(http.StatusTooManyRequests)
		return nil
	}
	return next.ServeHTTP(w, r)
}

// Interface guards.
var (
	_ caddy.Provisioner           = (*Handler)(nil)
	_ caddy.CleanerUpper          = (*Handler)(nil)
	_ caddyhttp.MiddlewareHandler = (*Handler)(nil)
)
