package lua

import (
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"github.com/sluicehq/sluice/lease"
)

// Config configures a Store. The zero value of each field means its
// default (see DefaultConfig); only Addrs is required.
type Config struct {
	// Addrs are the Redis addresses, "host:port". One address is a
	// standalone server (or, if it answers in cluster mode, a Cluster seed);
	// several are Cluster seeds; with SentinelMaster set they are the
	// Sentinels. Required.
	Addrs []string
	// SentinelMaster is the name of the master set monitored by the
	// Sentinels at Addrs. "" means no Sentinel.
	SentinelMaster string
	// Username and Password authenticate to Redis (ACL user, or only a
	// password for requirepass). "" means none.
	Username, Password string
	// SentinelUsername and SentinelPassword authenticate to the Sentinels.
	// "" means none.
	SentinelUsername, SentinelPassword string
	// DB is the database number (standalone and Sentinel only: a Cluster
	// has only database 0). Default 0.
	DB int
	// KeyPrefix starts every Redis key this Store writes, inside the hash
	// tag: "{<prefix>:<counter key>}:<algorithm>". It must not contain '{'
	// or '}'. Default "sl".
	KeyPrefix string
	// DialTimeout bounds connecting to a server. Default 1s.
	DialTimeout time.Duration
	// CallTimeout bounds a call whose context has no deadline. Default
	// lease.BreakerConfig's Timeout (50ms), the timeout of a Store call.
	CallTimeout time.Duration
	// ConnWriteTimeout is how long a connection waits on a server that
	// stopped answering before it is dropped and redialed. Default 3s.
	ConnWriteTimeout time.Duration
	// ClientName is sent with CLIENT SETNAME. Default "sluice".
	ClientName string
	// MaxBatch bounds how many lease and return calls share one script
	// call. A call goes out at once when no call of its group (the server;
	// on a Cluster, its key's hash slot) is in flight; calls that arrive
	// meanwhile go out together, at most MaxBatch per script call, when it
	// ends (or at once, when MaxBatch of them wait). 1 turns batching off
	// (every call its own script call), and is the default: batching cuts
	// the EVALSHA calls (up to 36× in closed loops), not Redis's CPU (it runs
	// the same scripts), and a call that waits for the batch in flight can
	// spend more of a check's budget. Worth it where each command costs
	// (a proxy or a service billed per command). At most MaxBatchLimit.
	MaxBatch int
	// FirstTouch is whether a key's first lease is written with SET NX
	// instead of a script (see first.go): "on", "off", or "" (default):
	// on, but off with MaxBatch above 1, where each command costs (a
	// first touch sends a SET and a TIME where a batch shares one script
	// call). On a Cluster first touches are off whatever this says.
	FirstTouch string
	// Clock is the node's clock, by which the Store dates the state a
	// first touch of a key writes between its samples of Redis's clock
	// (see first.go). Default time.Now. For tests whose redis-server runs
	// a fake clock: a Clock set here is taken to be Redis's own, and
	// allowed no drift from it.
	Clock func() time.Time
	// Metrics is the set the Store's counters go in
	// (sluice_redis_first_touches_total{result},
	// sluice_redis_clock_samples_total). Default: the process's default
	// set, where several Stores sum.
	Metrics *metrics.Set
}

// testClock, set by the package's tests, is the Clock of a Config without
// one, by its first address (the fake clock of a test's redis-server).
var testClock func(addr string) func() time.Time

// MaxBatchLimit bounds Config.MaxBatch: one script call blocks Redis for
// the sum of its calls' scripts.
const MaxBatchLimit = 1024

// DefaultConfig returns the defaults that a zero field stands for. Addrs is
// left empty: there is no sensible default server.
func DefaultConfig() Config {
	return Config{
		// "sl" is short: every byte of the prefix is paid in every key.
		KeyPrefix: "sl",
		// A loopback or same-zone server connects in well under a
		// millisecond; a second covers a slow TLS-terminating proxy, and
		// a dial does not block checks (they use the call timeout).
		DialTimeout: time.Second,
		// The breaker's timeout of a Store call (50 ms: what a failing
		// Store may add to a check, where a lease call takes well under a
		// millisecond on a healthy Redis).
		CallTimeout: lease.DefaultBreakerConfig().Timeout,
		// Long enough to ride out a fork or a slow AOF rewrite, short
		// enough that a hung server's connections are replaced quickly
		// (rueidis's own default is 10s).
		ConnWriteTimeout: 3 * time.Second,
		ClientName:       "sluice",
		// Off (see MaxBatch); 64 is a sensible bound when turned on: it
		// pays the per-call work (command, script lookup, reply) once
		// for 64 calls, and still blocks Redis no longer than 64 lease
		// scripts in a row.
		MaxBatch: 1,
	}
}

func (c Config) withDefaults() Config {
	d := DefaultConfig()
	if c.KeyPrefix == "" {
		c.KeyPrefix = d.KeyPrefix
	}
	if c.DialTimeout == 0 {
		c.DialTimeout = d.DialTimeout
	}
	if c.CallTimeout == 0 {
		c.CallTimeout = d.CallTimeout
	}
	if c.ConnWriteTimeout == 0 {
		c.ConnWriteTimeout = d.ConnWriteTimeout
	}
	if c.ClientName == "" {
		c.ClientName = d.ClientName
	}
	if c.MaxBatch == 0 {
		c.MaxBatch = d.MaxBatch
	}
	return c
}

// validate reports the first unusable field of a defaulted Config.
func (c Config) validate() error {
	if len(c.Addrs) == 0 {
		return fmt.Errorf("redis config: addrs: at least one address is required")
	}
	for _, a := range c.Addrs {
		if err := checkAddr(a); err != nil {
			return fmt.Errorf("redis config: addrs: %w", err)
		}
	}
	switch {
	case strings.ContainsAny(c.KeyPrefix, "{}"):
		return fmt.Errorf("redis config: key_prefix: %q must not contain '{' or '}'", c.KeyPrefix)
	case c.DB < 0:
		return fmt.Errorf("redis config: db: must be ≥ 0, got %d", c.DB)
	case c.DB != 0 && c.SentinelMaster == "" && len(c.Addrs) > 1:
		return fmt.Errorf("redis config: db: a Redis Cluster (several addresses) has only db 0, got %d", c.DB)
	case c.DialTimeout < 0:
		return fmt.Errorf("redis config: dial_timeout: must be ≥ 0")
	case c.CallTimeout < 0:
		return fmt.Errorf("redis config: call_timeout: must be ≥ 0")
	case c.ConnWriteTimeout < 0:
		return fmt.Errorf("redis config: conn_write_timeout: must be ≥ 0")
	case c.MaxBatch < 1 || c.MaxBatch > MaxBatchLimit:
		return fmt.Errorf("redis config: max_batch: must be between 1 and %d, got %d", MaxBatchLimit, c.MaxBatch)
	case c.FirstTouch != "" && c.FirstTouch != "on" && c.FirstTouch != "off":
		return fmt.Errorf("redis config: first_touch: must be on or off, got %q", c.FirstTouch)
	}
	return nil
}

// checkAddr reports whether a is "host:port" with a non-empty host and a
// port in 1..65535.
func checkAddr(a string) error {
	host, port, err := net.SplitHostPort(a)
	if err != nil {
		return fmt.Errorf("address %q: %v", a, err)
	}
	if host == "" {
		return fmt.Errorf("address %q: missing host", a)
	}
	if strings.ContainsAny(host, " \t\r\n/?#@,") {
		return fmt.Errorf("address %q: bad character in host", a)
	}
	n, err := strconv.Atoi(port)
	if err != nil || n < 1 || n > 65535 {
		return fmt.Errorf("address %q: port must be a number in 1..65535", a)
	}
	return nil
}

// ParseURL parses the SLUICE_REDIS forms into a Config with the other
// fields at their defaults:
//
//	host:port                          standalone (port defaults to 6379)
//	h1:p1,h2:p2,h3:p3                  Redis Cluster seeds
//	redis://[user:pass@]host:port[/db] standalone with credentials and db
//	redis://[user:pass@]h1:p1,h2:p2    Cluster with credentials
//	sentinel://master@h1:p1,h2:p2[/db] Sentinels watching master set "master"
//
// A URL (redis:// or sentinel://) may end with a query of username=,
// password= (the Redis credentials; the only way to give them with
// sentinel://, whose user part is the master name), sentinel_username=,
// sentinel_password=, max_batch= (Config.MaxBatch) and first_touch=
// (Config.FirstTouch). User, password and option values are
// percent-decoded (a password's '@', '?', '&', '%' and '/' must be
// percent-encoded). Errors name the part of s at fault and show s only as
// RedactURL gives it.
func ParseURL(s string) (Config, error) {
	var c Config
	s = strings.TrimSpace(s)
	shown := RedactURL(s)
	if s == "" {
		return c, fmt.Errorf("redis URL: empty")
	}
	scheme, rest, isURL := strings.Cut(s, "://")
	if !isURL {
		rest, scheme = s, ""
	}
	switch scheme {
	case "", "redis", "sentinel":
	case "rediss":
		return c, fmt.Errorf("redis URL %s: scheme: TLS (rediss://) is not supported yet", shown)
	default:
		return c, fmt.Errorf("redis URL %s: scheme: unknown (want redis:// or sentinel://)", shown)
	}
	if isURL {
		var query string
		rest, query, _ = strings.Cut(rest, "?")
		if err := parseQuery(&c, query); err != nil {
			return Config{}, fmt.Errorf("redis URL %s: %w", shown, err)
		}
		if i := strings.LastIndexByte(rest, '@'); i >= 0 {
			user := rest[:i]
			rest = rest[i+1:]
			if err := parseUser(&c, scheme, user); err != nil {
				return Config{}, fmt.Errorf("redis URL %s: %w", shown, err)
			}
		}
		if hosts, db, ok := strings.Cut(rest, "/"); ok {
			rest = hosts
			if db != "" {
				n, err := strconv.Atoi(db)
				if err != nil || n < 0 || n > 1<<16 {
					return Config{}, fmt.Errorf("redis URL %s: db: %q is not a database number", shown, db)
				}
				c.DB = n
			}
		}
		if scheme == "sentinel" && c.SentinelMaster == "" {
			return Config{}, fmt.Errorf("redis URL %s: master: sentinel:// needs the master set name, as sentinel://master@host:port", shown)
		}
	} else if strings.ContainsAny(rest, "@/?") {
		return c, fmt.Errorf("redis URL %s: credentials, db or options need the redis:// form", shown)
	}
	for _, a := range strings.Split(rest, ",") {
		a = strings.TrimSpace(a)
		if a == "" {
			return Config{}, fmt.Errorf("redis URL %s: address: empty address in the list", shown)
		}
		if !strings.Contains(a, ":") {
			a += ":6379"
		}
		if err := checkAddr(a); err != nil {
			return Config{}, fmt.Errorf("redis URL %s: %w", shown, err)
		}
		c.Addrs = append(c.Addrs, a)
	}
	if c.DB != 0 && c.SentinelMaster == "" && len(c.Addrs) > 1 {
		return Config{}, fmt.Errorf("redis URL %s: db: a Redis Cluster has only db 0", shown)
	}
	return c, nil
}

func parseUser(c *Config, scheme, user string) error {
	if scheme == "sentinel" {
		name, err := url.PathUnescape(user)
		if err != nil || name == "" || strings.ContainsAny(name, ":") {
			// Not quoted: a "name:password" would show the password.
			return fmt.Errorf("master: not a master set name (credentials go in ?password=)")
		}
		c.SentinelMaster = name
		return nil
	}
	u, p, hasPass := strings.Cut(user, ":")
	var err error
	if c.Username, err = url.PathUnescape(u); err != nil {
		return fmt.Errorf("username: bad percent-encoding")
	}
	if hasPass {
		if c.Password, err = url.PathUnescape(p); err != nil {
			return fmt.Errorf("password: bad percent-encoding")
		}
	}
	return nil
}

// parseQuery sets c's credentials from a URL query. Its errors name an
// option but never show a value (url.ParseQuery's would quote part of one).
func parseQuery(c *Config, query string) error {
	if query == "" {
		return nil
	}
	for part := range strings.SplitSeq(query, "&") {
		if part == "" {
			continue
		}
		name, val, hasVal := strings.Cut(part, "=")
		if !hasVal || !plainOption(name) {
			return fmt.Errorf("options: an option is not name=value (a value's '&', '=' and '%%' must be percent-encoded)")
		}
		v, err := url.QueryUnescape(val)
		if err != nil {
			return fmt.Errorf("options: %s: bad percent-encoding", name)
		}
		switch name {
		case "username":
			c.Username = v
		case "password":
			c.Password = v
		case "sentinel_username":
			c.SentinelUsername = v
		case "sentinel_password":
			c.SentinelPassword = v
		case "max_batch":
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 || n > MaxBatchLimit {
				return fmt.Errorf("options: max_batch: must be a number between 1 and %d", MaxBatchLimit)
			}
			c.MaxBatch = n
		case "first_touch":
			if v != "on" && v != "off" {
				return fmt.Errorf("options: first_touch: must be on or off")
			}
			c.FirstTouch = v
		default:
			return fmt.Errorf("options: unknown option %q (want username, password, sentinel_username, sentinel_password, max_batch or first_touch)", name)
		}
	}
	return nil
}

// plainOption reports whether name looks like an option name (1 to 32
// letters, digits, '_' or '-'), which errors and RedactURL may show when
// an '=' follows it (a bare word may be the tail of a password holding an
// unencoded '&').
func plainOption(name string) bool {
	if name == "" || len(name) > 32 {
		return false
	}
	for i := 0; i < len(name); i++ {
		b := name[i]
		if !('a' <= b && b <= 'z' || 'A' <= b && b <= 'Z' || '0' <= b && b <= '9' || b == '_' || b == '-') {
			return false
		}
	}
	return true
}

// redacted stands for a hidden credential in RedactURL's output.
const redacted = "xxxxx"

// RedactURL returns s, a -redis / SLUICE_REDIS value in any of ParseURL's
// forms (valid or not), with every credential replaced by "xxxxx": the
// password of the user part, and the value of every query option except
// username, sentinel_username, max_batch and first_touch. It keeps the scheme, user name, hosts and
// db, which is what an operator needs to read an error. Every message or
// log line that shows a Redis address shows it through RedactURL.
//
// When s cannot be split unambiguously (an '@' after the first '?': a
// password holding an unencoded '?' or an option value holding an '@'),
// everything after the scheme but the user name is hidden.
func RedactURL(s string) string {
	s = strings.TrimSpace(s)
	prefix, rest := "", s
	if scheme, r, ok := strings.Cut(s, "://"); ok {
		if !plainOption(scheme) {
			return redacted
		}
		prefix, rest = scheme+"://", r
	}
	q := strings.IndexByte(rest, '?')
	at := strings.LastIndexByte(rest, '@')
	if at >= 0 && q >= 0 && at > q {
		return prefix + redacted
	}
	var b strings.Builder
	b.WriteString(prefix)
	if at >= 0 {
		user, _, hasPass := strings.Cut(rest[:at], ":")
		b.WriteString(user)
		if hasPass {
			b.WriteString(":" + redacted)
		}
		b.WriteByte('@')
		rest = rest[at+1:]
		q -= at + 1
	}
	if q < 0 {
		b.WriteString(rest)
		return b.String()
	}
	b.WriteString(rest[:q+1])
	for i, part := range strings.Split(rest[q+1:], "&") {
		if i > 0 {
			b.WriteByte('&')
		}
		name, _, hasVal := strings.Cut(part, "=")
		switch {
		case part == "":
		case !hasVal || !plainOption(name):
			b.WriteString(redacted)
		case name == "username" || name == "sentinel_username" || name == "max_batch" || name == "first_touch":
			b.WriteString(part)
		default:
			b.WriteString(name + "=" + redacted)
		}
	}
	return b.String()
}
