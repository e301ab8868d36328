package sluicecaddy

import (
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
)

func init() {
	httpcaddyfile.RegisterHandlerDirective("sluice", parseCaddyfile)
	// After basic_auth, so that a key may be the authenticated user
	// ({http.auth.user.id}); before every handler that proxies or answers.
	// The global option `order sluice ...` overrides it.
	httpcaddyfile.RegisterDirectiveOrder("sluice", httpcaddyfile.After, "basic_auth")
}

func parseCaddyfile(h httpcaddyfile.Helper) (caddyhttp.MiddlewareHandler, error) {
	m := new(Handler)
	err := m.UnmarshalCaddyfile(h.Dispenser)
	return m, err
}

// UnmarshalCaddyfile sets up the handler from Caddyfile tokens:
//
//	sluice {
//		nodes <url>...
//		tls_ca <pem file>
//		token <token>
//		rule <name>
//		key <placeholder>
//		on_missing_key skip|deny
//	}
//
// Every subdirective takes its arguments on one line and may be given
// once; nodes, rule and key are required.
func (h *Handler) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	d.Next() // the directive's name
	if d.NextArg() {
		return d.Errf("sluice takes no arguments on its line, found %q: put the settings in a block", d.Val())
	}
	seen := map[string]bool{}
	for d.NextBlock(0) {
		sub := d.Val()
		if seen[sub] {
			return d.Errf("sluice: %s given twice", sub)
		}
		seen[sub] = true
		args := d.RemainingArgs()
		switch sub {
		case "nodes":
			if len(args) == 0 {
				return d.Err("sluice: nodes: at least one node URL is required")
			}
			h.Nodes = args
		case "token", "rule", "key", "on_missing_key", "tls_ca":
			if len(args) != 1 {
				return d.Errf("sluice: %s takes exactly one argument, found %d", sub, len(args))
			}
			switch sub {
			case "token":
				h.Token = args[0]
			case "rule":
				h.Rule = args[0]
			case "key":
				h.Key = args[0]
			case "on_missing_key":
				h.OnMissingKey = args[0]
			case "tls_ca":
				h.TLSCA = args[0]
			}
		default:
			return d.Errf("sluice: unknown setting %q (nodes, tls_ca, token, rule, key, on_missing_key)", sub)
		}
	}
	if err := h.validate(h.Nodes); err != nil {
		return d.WrapErr(err)
	}
	return nil
}

// Interface guard.
var _ caddyfile.Unmarshaler = (*Handler)(nil)
