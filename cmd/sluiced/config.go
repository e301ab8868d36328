package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/lease"
	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/node/api"
	"github.com/sluicehq/sluice/node/forward"
	"github.com/sluicehq/sluice/node/hot"
	"github.com/sluicehq/sluice/node/member"
	"github.com/sluicehq/sluice/node/rls"
)

// options are sluiced's settings, from flags and SLUICE_* environment
// variables (docs/configuration.md lists them).
type options struct {
	version  bool // -version: print the version and exit
	listen   string
	rules    string
	redis    string
	join     []string
	nodeName string
	gossip   string
	// gossipSet: -gossip or SLUICE_GOSSIP was given (not just the
	// default), which makes the node join a cluster even without -join.
	gossipSet       bool
	gossipAdvertise string
	clusterKey      []byte
	// insecureCluster: form or join a cluster without a cluster key
	// (gossip in clear, internal endpoint unauthenticated).
	insecureCluster bool
	// internalWindow: the acceptance window of signed internal requests.
	internalWindow time.Duration
	// tlsCert, tlsKey: serve (and forward) over TLS; tlsCA: the roots
	// peers' certificates must chain to (empty: the system's).
	tlsCert, tlsKey, tlsCA string
	adminToken             string
	// adminHosts: names besides localhost and the node's addresses that
	// admin requests may carry in Host (see node.Config.AdminHosts).
	adminHosts   []string
	metricsToken string
	clientToken  string
	leaseHorizon time.Duration
	leaseIdle    time.Duration
	// leaseKeepIdle: how many idle keys at most keep a slow key's loan
	// past -lease-idle (lease.Config.KeepIdle); 0: none.
	leaseKeepIdle int
	// leaseAhead: how far ahead fixed_window leases ask for shares of
	// the next windows (lease.Config.AheadHorizon); 0: none.
	leaseAhead     time.Duration
	storeTimeout   time.Duration
	checkBudget    time.Duration
	forwardTimeout time.Duration
	// clusterSize: the members a node counts as known (0: those it saw).
	clusterSize int
	rulesPoll   time.Duration
	logLevel    slog.Level
	// memoryLeases: on the in-memory store, lease into buckets as on
	// Redis instead of deciding each check in the store
	// (lease.Config.Direct).
	memoryLeases bool
	// hotSplit: split hot keys over the cluster (false: detect and show
	// them in /v1/hotkeys, never split).
	hotSplit bool
	// hotCapacityShare: a key taking more than this share of the checks
	// the node serves is hot; 0 turns it off.
	hotCapacityShare float64
	// dataDir keeps the rules written through the admin API when there
	// is neither a rule file nor Redis.
	dataDir string
	// acceptUnsignedRules: install a rule set from Redis that no node
	// signed (the upgrade from a release that did not sign).
	acceptUnsignedRules bool
	// rlsListen is the gRPC address of the Envoy rate limit service (""
	// = off); rlsConfig its envoyproxy/ratelimit configuration (file or
	// directory); rlsHeaders adds the RateLimit headers to its answers.
	rlsListen, rlsConfig string
	rlsHeaders           bool
	// rlsMetadata fills its answers' dynamic_metadata.
	rlsMetadata bool
	// rlsTransport is the rate limit service's gRPC transport.
	rlsTransport rls.Transport
	// rlsMaxConns bounds the rate limit service's connections (0: no
	// limit); rlsIdleTimeout closes its connections idle that long (0:
	// never).
	rlsMaxConns    int
	rlsIdleTimeout time.Duration
	// rlsClientCA: the CA file that the rate limit service's clients'
	// certificates must chain to (mTLS; "" = no client certificate).
	rlsClientCA string
	// upstream: the global tier's nodes (docs/regions.md); upstreamToken
	// its client token; region this node's region name there;
	// upstreamRTT the round trip to size its leases for (0: measured).
	upstream      []string
	upstreamToken string
	region        string
	upstreamRTT   time.Duration
	// gcHeadroom: the GC policy's headroom in percent of the live heap
	// (gc.go); 100: Go's default.
	gcHeadroom int
}

// setting is one flag and its environment variable.
type setting struct {
	flag, env, def, usage string
	// set parses and validates a value into o; its error is wrapped with
	// the flag's or the variable's name by the caller.
	set func(o *options, v string) error
}

// secret reports whether a setting's value must never be printed (a bad
// cluster key or token would otherwise end up in logs).
func (s *setting) secret() bool {
	return s.flag == "cluster-key" || s.flag == "admin-token" || s.flag == "metrics-token" || s.flag == "client-token" || s.flag == "upstream-token"
}

// shown is how a value of s appears in an error message.
func shown(s *setting, v string) string {
	if s.secret() {
		return "(redacted)"
	}
	return strconv.Quote(v)
}

// redactArgs removes the values of secret flags from a flag-parsing error
// (the flag package quotes the bad value).
func redactArgs(err error, ss []setting, args []string) error {
	msg := err.Error()
	for i, a := range args {
		for j := range ss {
			if !ss[j].secret() {
				continue
			}
			name := strings.TrimLeft(a, "-")
			if v, ok := strings.CutPrefix(name, ss[j].flag+"="); ok && v != "" {
				msg = strings.ReplaceAll(msg, strconv.Quote(v), "(redacted)")
			} else if name == ss[j].flag && i+1 < len(args) && args[i+1] != "" {
				msg = strings.ReplaceAll(msg, strconv.Quote(args[i+1]), "(redacted)")
			}
		}
	}
	if msg == err.Error() {
		return err
	}
	return errors.New(msg)
}

// settings are sluiced's flags, each with its variable and its default
// (defaults.go says where each default comes from).
func settings() []setting {
	lc := lease.DefaultConfig()
	return []setting{
		{"listen", "SLUICE_LISTEN", defaultListen, "HTTP API address host:port", func(o *options, v string) error {
			if _, _, err := net.SplitHostPort(v); err != nil {
				return errors.New("want host:port")
			}
			o.listen = v
			return nil
		}},
		{"rules", "SLUICE_RULES", "", "rule file (YAML); empty: no rules", func(o *options, v string) error {
			o.rules = v
			return nil
		}},
		{"redis", "SLUICE_REDIS", "", "Redis: host:port, several for Cluster, or sentinel://master@h:p,...; empty: in-memory store", func(o *options, v string) error {
			o.redis = v
			return nil
		}},
		{"join", "SLUICE_JOIN", "", "comma list of gossip seeds host:port; empty: single node", func(o *options, v string) error {
			o.join = nil
			for s := range strings.SplitSeq(v, ",") {
				s = strings.TrimSpace(s)
				if s == "" {
					continue
				}
				if _, _, err := net.SplitHostPort(s); err != nil {
					return fmt.Errorf("seed %q: want host:port", s)
				}
				o.join = append(o.join, s)
			}
			return nil
		}},
		{"node-name", "SLUICE_NODE_NAME", "", "unique member name; empty: hostname-port", func(o *options, v string) error {
			o.nodeName = v
			return nil
		}},
		{"gossip", "SLUICE_GOSSIP", member.DefaultConfig().BindAddr, "memberlist bind ip:port (UDP and TCP; empty ip: all interfaces); setting it, or -join, makes the node a cluster member", func(o *options, v string) error {
			host, _, err := net.SplitHostPort(v)
			if err != nil {
				return errors.New("want ip:port")
			}
			if host != "" && net.ParseIP(host) == nil {
				return fmt.Errorf("%q is not an IP address (gossip binds an IP; use -gossip-advertise for a name)", host)
			}
			o.gossip = v
			return nil
		}},
		{"gossip-advertise", "SLUICE_GOSSIP_ADVERTISE", "", "gossip host:port told to peers (behind NAT, in containers); empty: the -gossip address, or a private IP when it binds all interfaces", func(o *options, v string) error {
			if v != "" {
				if _, _, err := net.SplitHostPort(v); err != nil {
					return errors.New("want host:port")
				}
			}
			o.gossipAdvertise = v
			return nil
		}},
		{"cluster-key", "SLUICE_CLUSTER_KEY", "", "16, 24 or 32-byte key, base64 (openssl rand -base64 32), shared by every node: encrypts gossip and signs internal requests; required to form or join a cluster unless -insecure-cluster", func(o *options, v string) error {
			if v == "" {
				o.clusterKey = nil
				return nil
			}
			k, err := member.ParseClusterKey(v)
			if err != nil {
				return err
			}
			o.clusterKey = k
			return nil
		}},
		{"insecure-cluster", "SLUICE_INSECURE_CLUSTER", "false", "allow a cluster without -cluster-key: gossip in clear and an unauthenticated internal endpoint (anyone who reaches a node can join, forge refunds and raise limits); a warning is logged at start", boolSetter(func(o *options) *bool { return &o.insecureCluster })},
		{"tls-cert", "SLUICE_TLS_CERT", "", "PEM certificate (chain) file: serve the HTTP API, the internal endpoint and the rate limit service over TLS, and forward to peers over TLS (every node of a cluster must use TLS); with -tls-key", func(o *options, v string) error {
			o.tlsCert = v
			return nil
		}},
		{"tls-key", "SLUICE_TLS_KEY", "", "PEM private key file of -tls-cert", func(o *options, v string) error {
			o.tlsKey = v
			return nil
		}},
		{"tls-ca", "SLUICE_TLS_CA", "", "PEM CA file that peers' certificates, and an https:// -upstream's, must chain to (a cluster CA; certificates need IP SANs of the nodes' HTTP addresses); empty: the system's roots", func(o *options, v string) error {
			o.tlsCA = v
			return nil
		}},
		{"internal-window", "SLUICE_INTERNAL_WINDOW", durationText(forward.DefaultWindow), "how far a signed internal request's timestamp may be from this node's clock (either way); beyond it the request is refused and the clock skew logged", durationSetter(func(o *options) *time.Duration { return &o.internalWindow })},
		{"admin-token", "SLUICE_ADMIN_TOKEN", "", "bearer token of the admin endpoints (/v1/rules*, /v1/members, /v1/hotkeys, /v1/stats); empty: admin from loopback peers only", func(o *options, v string) error {
			o.adminToken = v
			return nil
		}},
		{"admin-hosts", "SLUICE_ADMIN_HOSTS", "", "comma list of host names admin requests may carry in Host or Origin besides localhost, loopback addresses and the node's own (a name to reach a tokenless node by, a proxy's public name)", func(o *options, v string) error {
			o.adminHosts = nil
			for h := range strings.SplitSeq(v, ",") {
				h = strings.TrimSpace(h)
				if h == "" {
					continue
				}
				if len(h) > 253 || strings.ContainsAny(h, ":/@[] \t") {
					return fmt.Errorf("host %q: want a host name without scheme or port", h)
				}
				o.adminHosts = append(o.adminHosts, h)
			}
			return nil
		}},
		{"metrics-token", "SLUICE_METRICS_TOKEN", "", "bearer token /metrics requires; empty: /metrics is open", func(o *options, v string) error {
			o.metricsToken = v
			return nil
		}},
		{"client-token", "SLUICE_CLIENT_TOKEN", "", "bearer token of the lease protocol (POST /v1/lease, GET /v1/lease/rules) through which gateways (node/client's Limiter) decide in their own process; it can lease, return and read the rules, never administer. Empty: the protocol is off (404)", func(o *options, v string) error {
			o.clientToken = v
			return nil
		}},
		{"lease-horizon", "SLUICE_LEASE_HORIZON", durationText(lc.Horizon), "how much of a key's traffic one lease covers", durationSetter(func(o *options) *time.Duration { return &o.leaseHorizon })},
		{"lease-idle", "SLUICE_LEASE_IDLE", durationText(lc.Idle), "keys idle this long return their tokens", durationSetter(func(o *options) *time.Duration { return &o.leaseIdle })},
		{"lease-keep-idle", "SLUICE_LEASE_KEEP_IDLE", strconv.Itoa(lc.KeepIdle), "how many keys idle for -lease-idle at most keep their loan while its tokens are spendable, if it is a slow key's (at most 2/8 of the rule's capacity, or half of it for a token_bucket or gcra key far from its limit): a check coming back after an idle spell is answered without a Store call; beyond, the longest idle give their tokens back. About 150-200 bytes of memory each; 0: none", boundedIntSetter(maxKeepIdle, func(o *options) *int { return &o.leaseKeepIdle })},
		{"lease-ahead", "SLUICE_LEASE_AHEAD", durationText(lc.LeaseTTL / 2), "how far ahead a fixed_window key's leases ask for a share of each next window (the smallest lease, 1/8 of the limit), so that a slow key checked every few windows makes one Store call per this instead of one per window; what the key's other holders can lose to a node's unspent shares is that share per window. Half the lease TTL by default; at most 24h; 0: none", boundedDurationSetter(lease.MaxLeaseTTL, func(o *options) *time.Duration { return &o.leaseAhead })},
		{"store-timeout", "SLUICE_STORE_TIMEOUT", durationText(lc.StoreTimeout), "timeout of one Store call", durationSetter(func(o *options) *time.Duration { return &o.storeTimeout })},
		{"check-budget", "SLUICE_CHECK_BUDGET", durationText(defaultCheckBudget), "the most a check waits on the Store (its lease call, or another check's for the same key): past it, it is decided by its rule's on_store_failure from what the node knows while the call goes on in the background; 0: wait as long as the Store call may take (up to 4 × -store-timeout)", func(o *options, v string) error {
			d, err := time.ParseDuration(v)
			if err != nil {
				return fmt.Errorf("invalid duration %q", v)
			}
			if d < 0 || d > time.Minute {
				return fmt.Errorf("must be between 0 and 1m, got %s", v)
			}
			o.checkBudget = d
			return nil
		}},
		{"forward-timeout", "SLUICE_FORWARD_TIMEOUT", durationText(forward.DefaultConfig().Timeout), "timeout of one forwarding request to a key's owner (the least: it stretches up to 2× on an owner whose round trips are slower); past it the checks are decided here (with Redis, by leasing from it; on the memory store by on_store_failure, within this node's share of the limit). It must be above -check-budget, plus a network hop: an owner answers within its check budget", durationSetter(func(o *options) *time.Duration { return &o.forwardTimeout })},
		{"cluster-size", "SLUICE_CLUSTER_SIZE", strconv.Itoa(member.DefaultConfig().ClusterSize), "how many members the cluster has: a member that sees fewer than a majority of them is the minority of a partition (not ready; on the memory store each limit cut to its share); 0: the members it saw within the last 5 min", boundedIntSetter(1024, func(o *options) *int { return &o.clusterSize })},
		{"rules-poll", "SLUICE_RULES_POLL", durationText(node.DefaultRulesPoll), "how often the rule file, or the version of the rules in Redis or -data-dir, is checked for changes", durationSetter(func(o *options) *time.Duration { return &o.rulesPoll })},
		{"data-dir", "SLUICE_DATA_DIR", "", "directory where a node without -rules and without -redis keeps the rules written through the admin API; empty: in memory only", func(o *options, v string) error {
			o.dataDir = v
			return nil
		}},
		{"rls-listen", "SLUICE_RLS_LISTEN", "", "gRPC address of the Envoy rate limit service (envoy.service.ratelimit.v3, envoyproxy/ratelimit's API); empty: off", func(o *options, v string) error {
			o.rlsListen = v
			return nil
		}},
		{"rls-config", "SLUICE_RLS_CONFIG", "", "envoyproxy/ratelimit YAML configuration, a file or a directory of files (one domain each), reloaded when it changes (checked every -rules-poll)", func(o *options, v string) error {
			o.rlsConfig = v
			return nil
		}},
		{"rls-transport", "SLUICE_RLS_TRANSPORT", string(rls.TransportLean), "the rate limit service's gRPC transport: lean (Sluice's own HTTP/2 server for its unary calls, a third of grpc-go's CPU per call; the health service's Watch is not served) or grpc (grpc-go's server)", func(o *options, v string) error {
			switch tr := rls.Transport(v); tr {
			case rls.TransportLean, rls.TransportGRPC:
				o.rlsTransport = tr
				return nil
			}
			return errors.New("want lean or grpc")
		}},
		{"rls-max-conns", "SLUICE_RLS_MAX_CONNS", strconv.Itoa(rls.DefaultMaxConns), "the most connections the rate limit service serves at once: past it, new connections wait in the listen backlog until one closes; 0: no limit", boundedIntSetter(maxRLSConns, func(o *options) *int { return &o.rlsMaxConns })},
		{"rls-idle-timeout", "SLUICE_RLS_IDLE_TIMEOUT", durationText(rls.DefaultIdleTimeout), "a rate limit service connection with no call in flight and no new call for this long is closed gracefully (GOAWAY: Envoy and gRPC clients reconnect); 0: never", boundedDurationSetter(maxRLSIdleTimeout, func(o *options) *time.Duration { return &o.rlsIdleTimeout })},
		{"rls-client-ca", "SLUICE_RLS_CLIENT_CA", "", "PEM CA file: the rate limit service (TLS with -tls-cert) requires a client certificate signed by it (mTLS) and refuses any other at the handshake; empty: no client certificate", func(o *options, v string) error {
			o.rlsClientCA = v
			return nil
		}},
		{"rls-headers", "SLUICE_RLS_HEADERS", "false", "add RateLimit-Limit/-Remaining/-Reset and RateLimit-Policy/RateLimit to the rate limit service's response_headers_to_add", boolSetter(func(o *options) *bool { return &o.rlsHeaders })},
		{"rls-dynamic-metadata", "SLUICE_RLS_DYNAMIC_METADATA", "false", "fill the rate limit service's dynamic_metadata as envoyproxy/ratelimit's RESPONSE_DYNAMIC_METADATA does: the domain, the descriptors, and the metadata of the matched descriptors not over their limit", boolSetter(func(o *options) *bool { return &o.rlsMetadata })},
		{"accept-unsigned-rules", "SLUICE_ACCEPT_UNSIGNED_RULES", "false", "install a rule set from Redis that is not signed with the cluster key (written by a node of a release that did not sign): for an upgrade, until the next rules write signs it; a badly signed set is refused all the same", boolSetter(func(o *options) *bool { return &o.acceptUnsignedRules })},
		{"memory-leases", "SLUICE_MEMORY_LEASES", "false", "on the in-memory store (no -redis), lease tokens into a bucket per key as on Redis instead of deciding each check in the store: about twice the memory per key (a bucket beside the store's record), checks of one hot key spread over CPUs instead of taking its shard's lock, and decisions no longer exact (a bucket holds a batch). Ignored with -redis", boolSetter(func(o *options) *bool { return &o.memoryLeases })},
		{"hot-split", "SLUICE_HOT_SPLIT", strconv.FormatBool(defaultHotSplit), "split hot keys over the cluster's nodes; false: detect and show them (/v1/hotkeys), never split", boolSetter(func(o *options) *bool { return &o.hotSplit })},
		{"hot-capacity-share", "SLUICE_HOT_CAPACITY_SHARE", floatText(hot.DefaultConfig().CapacityShare), "a key taking more than this share (0 to 1) of the checks a node serves is hot, whatever its rule's hot.threshold; 0: off", func(o *options, v string) error {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil || !(f >= 0 && f <= 1) {
				return fmt.Errorf("want a number between 0 and 1, got %q", v)
			}
			o.hotCapacityShare = f
			return nil
		}},
		{"upstream", "SLUICE_UPSTREAM", "", "the global tier: URLs of a Sluice cluster's nodes (http://host:port,...) whose lease protocol this node leases the keys of global rules (scope: global) from; empty: global rules are counted by this node's own Store", func(o *options, v string) error {
			o.upstream = nil
			for u := range strings.SplitSeq(v, ",") {
				u = strings.TrimSpace(u)
				if u == "" {
					continue
				}
				rest, ok := strings.CutPrefix(u, "http://")
				if !ok {
					rest, ok = strings.CutPrefix(u, "https://")
				}
				if _, _, err := net.SplitHostPort(strings.TrimSuffix(rest, "/")); !ok || err != nil {
					return fmt.Errorf("%q: want http://host:port or https://host:port", u)
				}
				o.upstream = append(o.upstream, u)
			}
			return nil
		}},
		{"upstream-token", "SLUICE_UPSTREAM_TOKEN", "", "the global tier's client token (its -client-token)", func(o *options, v string) error {
			o.upstreamToken = v
			return nil
		}},
		{"region", "SLUICE_REGION", "", "this node's region, as the global tier names its holder (A-Z a-z 0-9 _ . -); empty: the node name", func(o *options, v string) error {
			if v != "" && !api.ValidName(v) {
				return errors.New("want 1 to 64 bytes of A-Z a-z 0-9 _ . -")
			}
			o.region = v
			return nil
		}},
		{"upstream-rtt", "SLUICE_UPSTREAM_RTT", "0", "the round trip to the global tier that leases of global rules are sized for (they cover at least 8 round trips); 0: measured at start", func(o *options, v string) error {
			d, err := time.ParseDuration(v)
			if err != nil || d < 0 || d > time.Minute {
				return fmt.Errorf("want a duration between 0 and 1m, got %q", v)
			}
			o.upstreamRTT = d
			return nil
		}},
		{"gc-headroom", "SLUICE_GC_HEADROOM", strconv.Itoa(defaultGCHeadroom), "how far the heap may grow past the live heap before the garbage collector runs, in percent of the live heap, once that growth is 32 MiB or more (below, Go's default: 100%); 100: Go's default. Ignored when GOGC or GOMEMLIMIT is set", func(o *options, v string) error {
			n, err := strconv.Atoi(v)
			if err != nil || n < 10 || n > 100 {
				return fmt.Errorf("want a whole percent between 10 and 100, got %q", v)
			}
			o.gcHeadroom = n
			return nil
		}},
		{"log-level", "SLUICE_LOG_LEVEL", defaultLogLevel, "debug, info, warn or error", func(o *options, v string) error {
			var l slog.Level
			if err := l.UnmarshalText([]byte(v)); err != nil {
				return errors.New("want debug, info, warn or error")
			}
			o.logLevel = l
			return nil
		}},
	}
}

// maxRLSConns bounds -rls-max-conns; maxRLSIdleTimeout bounds
// -rls-idle-timeout.
const (
	maxRLSConns       = 1_000_000
	maxRLSIdleTimeout = 24 * time.Hour
)

// maxKeepIdle bounds -lease-keep-idle: ten million kept keys hold about
// 2 GB.
const maxKeepIdle = 10_000_000

func durationSetter(field func(*options) *time.Duration) func(*options, string) error {
	return func(o *options, v string) error {
		d, err := time.ParseDuration(v)
		if err != nil {
			return fmt.Errorf("invalid duration %q", v)
		}
		if d <= 0 {
			return fmt.Errorf("must be > 0, got %s", v)
		}
		*field(o) = d
		return nil
	}
}

// boundedIntSetter parses a whole number between 0 and maxN into field.
// boolSetter parses true or false (as strconv.ParseBool) into field.
func boolSetter(field func(*options) *bool) func(*options, string) error {
	return func(o *options, v string) error {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return errors.New("want true or false")
		}
		*field(o) = b
		return nil
	}
}

func boundedIntSetter(maxN int, field func(*options) *int) func(*options, string) error {
	return func(o *options, v string) error {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 || n > maxN {
			return fmt.Errorf("want a whole number between 0 and %d, got %q", maxN, v)
		}
		*field(o) = n
		return nil
	}
}

// boundedDurationSetter parses a duration between 0 and maxD into field.
func boundedDurationSetter(maxD time.Duration, field func(*options) *time.Duration) func(*options, string) error {
	return func(o *options, v string) error {
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 || d > maxD {
			return fmt.Errorf("want a duration between 0 and %v, got %q", maxD, v)
		}
		*field(o) = d
		return nil
	}
}

// settingValue is a flag.Value that parses into options.
type settingValue struct {
	o   *options
	s   *setting
	cur string
}

func (v *settingValue) String() string {
	if v == nil {
		return ""
	}
	return v.cur
}

// IsBoolFlag lets a setting whose default is a boolean be given as -flag
// alone (meaning true).
func (v *settingValue) IsBoolFlag() bool { return v.s.def == "true" || v.s.def == "false" }

func (v *settingValue) Set(s string) error {
	if err := v.s.set(v.o, s); err != nil {
		return err
	}
	v.cur = s
	return nil
}

// parseOptions reads defaults, then the environment, then flags (each
// overriding the one before). A bad value is an error naming the flag or
// the variable; -h prints the usage and returns flag.ErrHelp.
func parseOptions(args []string, getenv func(string) string, out io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("sluiced", flag.ContinueOnError)
	fs.SetOutput(io.Discard) // errors are returned, usage printed below
	fs.Usage = func() {}
	ss := settings()
	for i := range ss {
		s := &ss[i]
		if err := s.set(&o, s.def); err != nil {
			return o, fmt.Errorf("default of -%s: %w", s.flag, err) // a bug
		}
		v := &settingValue{o: &o, s: s, cur: s.def}
		if e := getenv(s.env); e != "" {
			if err := v.Set(e); err != nil {
				return o, fmt.Errorf("invalid value %s for %s: %w", shown(s, e), s.env, err)
			}
		}
		fs.Var(v, s.flag, s.usage)
	}
	usage := func() {
		fmt.Fprintf(out, "Usage: sluiced [flags]\n\nsluiced is a Sluice node. Every flag can also be set by its environment\nvariable; flags override the environment.\n\n")
		for _, s := range ss {
			def := s.def
			if def == "" {
				def = "none"
			}
			fmt.Fprintf(out, "  -%s (env %s, default %s)\n    \t%s\n", s.flag, s.env, def, s.usage)
		}
		fmt.Fprintf(out, "  -version\n    \tprint the version (module version and VCS revision) and exit\n")
	}
	fs.BoolVar(&o.version, "version", false, "")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			usage()
		}
		return o, redactArgs(err, ss, args)
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if o.version {
		return o, nil // the other settings are not checked: they are not used
	}
	o.gossipSet = getenv("SLUICE_GOSSIP") != ""
	fs.Visit(func(f *flag.Flag) {
		if f.Name == "gossip" {
			o.gossipSet = true
		}
	})
	if err := o.checkClusterKey(); err != nil {
		return o, err
	}
	if o.checkBudget > 0 && o.forwardTimeout <= o.checkBudget {
		return o, fmt.Errorf("-forward-timeout (SLUICE_FORWARD_TIMEOUT) %s must be above -check-budget (SLUICE_CHECK_BUDGET) %s: an owner may take its whole budget, and the sender would shed what it answers in time", o.forwardTimeout, o.checkBudget)
	}
	if (o.tlsCert == "") != (o.tlsKey == "") {
		return o, errors.New("-tls-cert (SLUICE_TLS_CERT) and -tls-key (SLUICE_TLS_KEY) go together: set both or neither")
	}
	if o.tlsCA != "" && o.tlsCert == "" && !o.httpsUpstream() {
		return o, errors.New("-tls-ca (SLUICE_TLS_CA) needs -tls-cert and -tls-key, or an https:// -upstream")
	}
	if o.rlsClientCA != "" && (o.tlsCert == "" || o.rlsListen == "") {
		return o, errors.New("-rls-client-ca (SLUICE_RLS_CLIENT_CA) needs -rls-listen, -tls-cert and -tls-key: client certificates are asked for in the rate limit service's TLS handshake")
	}
	if len(o.upstream) > 0 && o.upstreamToken == "" {
		return o, errors.New("-upstream (SLUICE_UPSTREAM) needs the global tier's client token: SLUICE_UPSTREAM_TOKEN (-upstream-token)")
	}
	return o, nil
}

// httpsUpstream reports whether -upstream names its nodes by https://.
func (o *options) httpsUpstream() bool {
	return len(o.upstream) > 0 && strings.HasPrefix(o.upstream[0], "https://")
}

// errNoClusterKey is the refusal to cluster without a key.
var errNoClusterKey = errors.New("refusing to form or join a cluster without a cluster key: " +
	"set SLUICE_CLUSTER_KEY (-cluster-key) to the same key on every node (openssl rand -base64 32), " +
	"or set SLUICE_INSECURE_CLUSTER=true (-insecure-cluster) to run a cluster that anyone who reaches it can join")

// checkClusterKey refuses a clustered node without a cluster key, unless
// -insecure-cluster is given.
func (o options) checkClusterKey() error {
	if o.clustered() && len(o.clusterKey) == 0 && !o.insecureCluster {
		return errNoClusterKey
	}
	return nil
}
