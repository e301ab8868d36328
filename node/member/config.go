package member

import (
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/hashicorp/memberlist"
)

// ErrConfig means a Config field is invalid; the wrapping error names the
// field.
var ErrConfig = errors.New("invalid membership config")

// ErrClusterKey means a cluster key is not the base64 encoding of 16, 24 or
// 32 bytes.
var ErrClusterKey = errors.New("invalid cluster key")

// Config configures a Cluster. The zero value of every field means the
// default given in its comment (DefaultConfig spells the defaults out).
type Config struct {
	// Name is this node's unique member name. Default: the hostname and the
	// port of HTTPAddr ("host-8080"), or of BindAddr without HTTPAddr.
	Name string

	// BindAddr is the gossip address "host:port" (UDP and TCP) to listen
	// on. An empty host means all interfaces. Default ":7946". Ignored
	// when Transport is set (the transport is already bound).
	BindAddr string

	// AdvertiseAddr is the gossip address "host:port" told to peers.
	// Default: BindAddr's, and when that host is empty or unspecified,
	// a private IP of this host chosen by memberlist.
	AdvertiseAddr string

	// HTTPAddr is this node's HTTP API address, carried in the node meta so
	// that peers can forward to it. A missing or unspecified host (":8080",
	// "0.0.0.0:8080") is replaced by the advertised gossip IP. At most 255
	// bytes. Default: empty (the node cannot be forwarded to).
	HTTPAddr string

	// Join lists the gossip seeds "host:port" to join at Start; all of
	// them are contacted, and joining is retried in the background until
	// one answers (see JoinRetryMax). This node's own address is skipped.
	// Empty means a single-node cluster, ready at once.
	Join []string

	// ClusterKey is the AES key (16, 24 or 32 bytes) that encrypts and
	// authenticates gossip; nodes with a different key (or none) cannot
	// join. Required unless Insecure is set. See ParseClusterKey.
	ClusterKey []byte

	// Insecure allows a nil ClusterKey: gossip in clear, which anyone who
	// can reach the gossip port may join (and so take a share of the
	// ring). Default false: Start refuses a Config without a key.
	Insecure bool

	// Transport, when set, replaces memberlist's UDP+TCP net transport;
	// tests inject a netsim.FilterTransport. The Cluster owns it and shuts
	// it down on Close.
	Transport memberlist.Transport

	// Logger receives memberlist's log lines, at their own levels, and the
	// Cluster's; lines about gossip refused (a packet that does not
	// decrypt, a stream of a stranger) are logged at most once every 10s,
	// each saying how many were suppressed. Nil discards them.
	Logger *slog.Logger

	// Metrics is the set sluice_gossip_rejected_packets_total (the packets
	// and streams refused) is registered in. Nil means the process's
	// default set.
	Metrics *metrics.Set

	// Now is the clock of the log's rate limit. Nil means time.Now.
	Now func() time.Time

	// OnMessage, when set, receives every message another member
	// Broadcast. It is called serially from one goroutine owned by the
	// Cluster; the slice is the callee's. When it falls more than
	// MessageQueue messages behind, newer messages are dropped (counted
	// by DroppedMessages).
	OnMessage func(msg []byte)

	// MessageQueue bounds the received messages waiting for OnMessage.
	// Default 1024.
	MessageQueue int

	// ProbeInterval is the time between failure probes of a random member.
	// Default 1s (memberlist's LAN value): a dead node is noticed in a few
	// seconds at a cost of one small UDP packet per node per second.
	ProbeInterval time.Duration

	// ProbeTimeout is how long a probe waits for an ack before trying
	// indirect probes. Default 500ms: generous for a LAN round trip, even
	// under GC pauses.
	ProbeTimeout time.Duration

	// GossipInterval is the time between gossip rounds that spread
	// membership changes and broadcasts. Default 200ms: a change reaches a
	// 10-node cluster in well under a second.
	GossipInterval time.Duration

	// PushPullInterval is the time between full state exchanges with a
	// random member (anti-entropy). Default 30s.
	PushPullInterval time.Duration

	// SuspicionMult scales how long a member stays suspect before it is
	// declared dead: SuspicionMult × log10(N+1) × ProbeInterval, at least.
	// Default 4.
	SuspicionMult int

	// TCPTimeout bounds a stream connection (join, push/pull, TCP probe).
	// Default 5s: a LAN peer answers in milliseconds, and Close may wait
	// this long for a join in flight.
	TCPTimeout time.Duration

	// DeadNodeReclaimTime is how long a dead member's name stays reserved
	// before another address may take it (a restarted pod with a new IP).
	// Default 30s.
	DeadNodeReclaimTime time.Duration

	// JoinRetryMax is the longest pause between background join attempts
	// (the pause doubles from JoinRetryMin). Default 10s.
	JoinRetryMax time.Duration

	// JoinRetryMin is the first pause between background join attempts.
	// Default 250ms.
	JoinRetryMin time.Duration

	// ReconnectInterval is how often the Cluster tries to rejoin members
	// that failed (died without leaving), and the seeds when it is alone,
	// so that the two sides of a healed partition merge again (memberlist
	// alone never contacts a dead member after GossipToTheDeadTime).
	// Default 5s. Negative disables reconnection.
	ReconnectInterval time.Duration

	// ReconnectTimeout is how long a failed member is retried before it is
	// forgotten. Default 1h.
	ReconnectTimeout time.Duration

	// ReachInterval is how often the Cluster pings every member itself
	// (see Cluster.Quorum), one ping at a time per member. Default 100ms
	// (a LAN ping takes well under 1ms: about ten small UDP packets a
	// second per member). Negative disables the pings:
	// every live member then counts as answering.
	ReachInterval time.Duration

	// ReachMisses is how many pings in a row a member must leave
	// unanswered to count as not answering (each waits up to
	// ProbeTimeout; one at a time per member). Default 2: with
	// memberlist's 500ms ProbeTimeout a cut shows within about 1.2s
	// (two timed-out pings and the ticks before them), a lost packet does
	// not, nor a stall of this node itself.
	ReachMisses int

	// KnownWindow is how long a member that failed (without leaving)
	// still counts among the members this node last knew. Default 5m: a
	// partition that lasts longer makes each side count only what it
	// sees. A graceful leave is forgotten at once.
	KnownWindow time.Duration

	// ClusterSize, when above zero, is the number of members the node
	// counts as known whatever it saw (sluiced -cluster-size): with 5, a
	// node that sees 2 is a minority even right after it started. Zero
	// counts the members seen within KnownWindow.
	ClusterSize int
}

// DefaultConfig returns the defaults, tuned for a LAN (one data centre or
// PoP): memberlist's LAN timings, which notice a dead node in about five
// seconds and spread a change in under one, with a shorter TCP timeout and
// a reconnect loop for partitions.
func DefaultConfig() Config {
	return Config{
		BindAddr:            ":7946",
		MessageQueue:        1024,
		ProbeInterval:       time.Second,
		ProbeTimeout:        500 * time.Millisecond,
		GossipInterval:      200 * time.Millisecond,
		PushPullInterval:    30 * time.Second,
		SuspicionMult:       4,
		TCPTimeout:          5 * time.Second,
		DeadNodeReclaimTime: 30 * time.Second,
		JoinRetryMin:        250 * time.Millisecond,
		JoinRetryMax:        10 * time.Second,
		ReconnectInterval:   5 * time.Second,
		ReconnectTimeout:    time.Hour,
		ReachInterval:       100 * time.Millisecond,
		ReachMisses:         2,
		KnownWindow:         5 * time.Minute,
	}
}

// ParseClusterKey decodes a cluster key given as base64 (standard or
// URL alphabet, padded or not) of 16, 24 or 32 bytes, as SLUICE_CLUSTER_KEY
// carries it. Surrounding white space is ignored.
func ParseClusterKey(b64 string) ([]byte, error) {
	s := strings.TrimSpace(b64)
	if s == "" {
		return nil, fmt.Errorf("%w: empty", ErrClusterKey)
	}
	var (
		key []byte
		err error
	)
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
		key, err = enc.DecodeString(s)
		if err == nil {
			break
		}
	}
	if err != nil {
		return nil, fmt.Errorf("%w: not base64: %v", ErrClusterKey, err)
	}
	if err := checkKey(key); err != nil {
		return nil, err
	}
	return key, nil
}

func checkKey(key []byte) error {
	switch len(key) {
	case 16, 24, 32:
		return nil
	}
	return fmt.Errorf("%w: %d bytes, want 16, 24 or 32 (AES-128, -192 or -256)", ErrClusterKey, len(key))
}

// withDefaults fills zero fields from DefaultConfig and validates the
// result.
func (c Config) withDefaults() (Config, error) {
	d := DefaultConfig()
	setDur := func(v *time.Duration, def time.Duration) {
		if *v == 0 {
			*v = def
		}
	}
	if c.BindAddr == "" {
		c.BindAddr = d.BindAddr
	}
	if c.Metrics == nil {
		c.Metrics = metrics.GetDefaultSet()
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.MessageQueue == 0 {
		c.MessageQueue = d.MessageQueue
	}
	if c.SuspicionMult == 0 {
		c.SuspicionMult = d.SuspicionMult
	}
	setDur(&c.ProbeInterval, d.ProbeInterval)
	setDur(&c.ProbeTimeout, d.ProbeTimeout)
	setDur(&c.GossipInterval, d.GossipInterval)
	setDur(&c.PushPullInterval, d.PushPullInterval)
	setDur(&c.TCPTimeout, d.TCPTimeout)
	setDur(&c.DeadNodeReclaimTime, d.DeadNodeReclaimTime)
	setDur(&c.JoinRetryMin, d.JoinRetryMin)
	setDur(&c.JoinRetryMax, d.JoinRetryMax)
	setDur(&c.ReconnectInterval, d.ReconnectInterval)
	setDur(&c.ReconnectTimeout, d.ReconnectTimeout)
	setDur(&c.ReachInterval, d.ReachInterval)
	if c.ReachMisses == 0 {
		c.ReachMisses = d.ReachMisses
	}
	setDur(&c.KnownWindow, d.KnownWindow)

	bad := func(field, format string, args ...any) (Config, error) {
		return c, fmt.Errorf("%w: %s: %s", ErrConfig, field, fmt.Sprintf(format, args...))
	}
	if c.Transport == nil {
		if _, _, err := splitHostPort(c.BindAddr); err != nil {
			return bad("BindAddr", "%v", err)
		}
	}
	if c.AdvertiseAddr != "" {
		if _, _, err := splitHostPort(c.AdvertiseAddr); err != nil {
			return bad("AdvertiseAddr", "%v", err)
		}
	}
	if c.HTTPAddr != "" {
		if _, _, err := splitHostPort(c.HTTPAddr); err != nil {
			return bad("HTTPAddr", "%v", err)
		}
	}
	if len(c.HTTPAddr) > maxHTTPAddr {
		return bad("HTTPAddr", "%d bytes, at most %d", len(c.HTTPAddr), maxHTTPAddr)
	}
	for i, s := range c.Join {
		if _, _, err := net.SplitHostPort(s); err != nil {
			return bad(fmt.Sprintf("Join[%d]", i), "%q: want host:port", s)
		}
	}
	if c.ClusterKey != nil {
		if err := checkKey(c.ClusterKey); err != nil {
			return bad("ClusterKey", "%v", err)
		}
	} else if !c.Insecure {
		return bad("ClusterKey", "required: a cluster without a key can be joined by anyone who reaches the gossip port (set Insecure to allow it)")
	}
	if c.ReachMisses < 0 {
		return bad("ReachMisses", "%d: must not be negative", c.ReachMisses)
	}
	if c.ClusterSize < 0 {
		return bad("ClusterSize", "%d: must not be negative", c.ClusterSize)
	}
	if c.MessageQueue < 0 {
		return bad("MessageQueue", "%d: must not be negative", c.MessageQueue)
	}
	if c.SuspicionMult < 1 {
		return bad("SuspicionMult", "%d: must be at least 1", c.SuspicionMult)
	}
	for _, f := range []struct {
		name string
		v    time.Duration
	}{
		{"ProbeInterval", c.ProbeInterval}, {"ProbeTimeout", c.ProbeTimeout},
		{"GossipInterval", c.GossipInterval}, {"PushPullInterval", c.PushPullInterval},
		{"TCPTimeout", c.TCPTimeout}, {"DeadNodeReclaimTime", c.DeadNodeReclaimTime},
		{"JoinRetryMin", c.JoinRetryMin}, {"JoinRetryMax", c.JoinRetryMax},
		{"ReconnectTimeout", c.ReconnectTimeout}, {"KnownWindow", c.KnownWindow},
	} {
		if f.v < 0 {
			return bad(f.name, "%v: must not be negative", f.v)
		}
	}
	if c.ProbeTimeout >= c.ProbeInterval {
		return bad("ProbeTimeout", "%v: must be shorter than ProbeInterval (%v)", c.ProbeTimeout, c.ProbeInterval)
	}
	if c.JoinRetryMin > c.JoinRetryMax {
		return bad("JoinRetryMin", "%v: must not exceed JoinRetryMax (%v)", c.JoinRetryMin, c.JoinRetryMax)
	}
	if c.Name == "" {
		c.Name = defaultName(c.HTTPAddr, c.BindAddr)
	}
	return c, nil
}

// splitHostPort splits "host:port" and checks the port is a number in
// 0..65535.
func splitHostPort(addr string) (string, int, error) {
	host, portStr, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, fmt.Errorf("%q: want host:port", addr)
	}
	port, err := strconv.Atoi(portStr)
	if err != nil || port < 0 || port > 65535 {
		return "", 0, fmt.Errorf("%q: port %q is not a number in 0..65535", addr, portStr)
	}
	return host, port, nil
}

// defaultName is the hostname and a port: the HTTP port if known, else the
// gossip port, so that several nodes on one host get distinct names.
func defaultName(httpAddr, bindAddr string) string {
	host, _ := os.Hostname()
	if host == "" {
		host = "sluice"
	}
	for _, a := range []string{httpAddr, bindAddr} {
		if _, port, err := net.SplitHostPort(a); err == nil && port != "" && port != "0" {
			return host + "-" + port
		}
	}
	return host
}
