package lua

import (
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"
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
	// 50ms, the per-call Store timeout of the design.
	CallTimeout time.Duration
	// ConnWriteTimeout is how long a connection waits on a server that
	// stopped answering before it is dropped and redialed. Default 3s.
	ConnWriteTimeout time.Duration
	// ClientName is sent with CLIENT SETNAME. Default "sluice".
	ClientName string
}

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
		// A lease call takes well under a millisecond on a healthy Redis;
		// 50 ms bounds what a failing Store adds to a check.
		CallTimeout: 50 * time.Millisecond,
		// Long enough to ride out a fork or a slow AOF rewrite, short
		// enough that a hung server's connections are replaced quickly
		// (rueidis's own default is 10s).
		ConnWriteTimeout: 3 * time.Second,
		ClientName:       "sluice",
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
// sentinel://, whose user part is the master name), sentinel_username= and
// sentinel_password=. User and password are percent-decoded. Errors name
// the part of s at fault.
func ParseURL(s string) (Config, error) {
	var c Config
	s = strings.TrimSpace(s)
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
		return c, fmt.Errorf("redis URL %q: scheme: TLS (rediss://) is not supported yet", s)
	default:
		return c, fmt.Errorf("redis URL %q: scheme: unknown %q (want redis:// or sentinel://)", s, scheme)
	}
	if isURL {
		var query string
		rest, query, _ = strings.Cut(rest, "?")
		if err := parseQuery(&c, query); err != nil {
			return Config{}, fmt.Errorf("redis URL %q: %w", s, err)
		}
		if i := strings.LastIndexByte(rest, '@'); i >= 0 {
			user := rest[:i]
			rest = rest[i+1:]
			if err := parseUser(&c, scheme, user); err != nil {
				return Config{}, fmt.Errorf("redis URL %q: %w", s, err)
			}
		}
		if hosts, db, ok := strings.Cut(rest, "/"); ok {
			rest = hosts
			if db != "" {
				n, err := strconv.Atoi(db)
				if err != nil || n < 0 || n > 1<<16 {
					return Config{}, fmt.Errorf("redis URL %q: db: %q is not a database number", s, db)
				}
				c.DB = n
			}
		}
		if scheme == "sentinel" && c.SentinelMaster == "" {
			return Config{}, fmt.Errorf("redis URL %q: master: sentinel:// needs the master set name, as sentinel://master@host:port", s)
		}
	} else if strings.ContainsAny(rest, "@/?") {
		return c, fmt.Errorf("redis URL %q: credentials, db or options need the redis:// form", s)
	}
	for _, a := range strings.Split(rest, ",") {
		a = strings.TrimSpace(a)
		if a == "" {
			return Config{}, fmt.Errorf("redis URL %q: address: empty address in the list", s)
		}
		if !strings.Contains(a, ":") {
			a += ":6379"
		}
		if err := checkAddr(a); err != nil {
			return Config{}, fmt.Errorf("redis URL %q: %w", s, err)
		}
		c.Addrs = append(c.Addrs, a)
	}
	if c.DB != 0 && c.SentinelMaster == "" && len(c.Addrs) > 1 {
		return Config{}, fmt.Errorf("redis URL %q: db: a Redis Cluster has only db 0", s)
	}
	return c, nil
}

func parseUser(c *Config, scheme, user string) error {
	if scheme == "sentinel" {
		name, err := url.PathUnescape(user)
		if err != nil || name == "" || strings.ContainsAny(name, ":") {
			return fmt.Errorf("master: %q is not a master set name", user)
		}
		c.SentinelMaster = name
		return nil
	}
	u, p, hasPass := strings.Cut(user, ":")
	var err error
	if c.Username, err = url.PathUnescape(u); err != nil {
		return fmt.Errorf("username: %v", err)
	}
	if hasPass {
		if c.Password, err = url.PathUnescape(p); err != nil {
			return fmt.Errorf("password: bad percent-encoding")
		}
	}
	return nil
}

func parseQuery(c *Config, query string) error {
	if query == "" {
		return nil
	}
	v, err := url.ParseQuery(query)
	if err != nil {
		return fmt.Errorf("options: %v", err)
	}
	for name, vals := range v {
		val := vals[len(vals)-1]
		switch name {
		case "username":
			c.Username = val
		case "password":
			c.Password = val
		case "sentinel_username":
			c.SentinelUsername = val
		case "sentinel_password":
			c.SentinelPassword = val
		default:
			return fmt.Errorf("options: unknown option %q (want username, password, sentinel_username or sentinel_password)", name)
		}
	}
	return nil
}
