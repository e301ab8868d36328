package forward

import (
	"crypto/tls"
	"fmt"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"github.com/sluicehq/sluice/shard"
)

// Config configures a [Forwarder].
type Config struct {
	// FlushInterval is how long a peer's collector waits, after the first
	// item of a batch, for more items. It runs on the real clock (a
	// batching window of microseconds, not a time a test waits out).
	FlushInterval time.Duration
	// EagerFlush sends a batch as soon as a connection is free instead of
	// waiting out FlushInterval: batches then form only while every
	// connection to the peer is busy (self-clocking, like a group
	// commit). It trades more, smaller requests at moderate load for less
	// latency; see BenchmarkForward. False (the default) sends every
	// FlushInterval or at MaxBatch items.
	EagerFlush bool
	// MaxBatch is the most items of one request; a batch that reaches it
	// is sent at once. At most MaxItems.
	MaxBatch int
	// Timeout is the least time one request (connection included) is
	// given before the peer is skipped. Each peer's
	// timeout adapts to its round trips as TCP's retransmission timeout
	// does (RFC 6298): 2 × (srtt + 4·rttvar), between Timeout and
	// MaxTimeout, a timed-out request counting as a round trip of the
	// timeout it had. So a loaded owner that answers in 100ms gets the
	// room it needs instead of timing out batch after batch: a batch
	// that times out may still be decided by the owner, and its items,
	// shed by the sender, are admissions lost.
	Timeout time.Duration
	// MaxTimeout bounds the adaptive timeout. Zero means 2 × Timeout (the
	// default's ratio, whatever Timeout is); below Timeout means Timeout.
	MaxTimeout time.Duration
	// Backoff is how long a peer is considered down after a failed
	// request: its items fail at once with ErrPeerUnavailable.
	Backoff time.Duration
	// ClusterKey, when not empty, is the cluster's shared key: every
	// request is signed with it and every reply must be (see the package
	// doc). Empty sends unsigned requests.
	ClusterKey []byte
	// TLS, when not nil, makes requests go over TLS with this config
	// (owners serve the internal endpoint behind TLS: sluiced -tls-cert).
	// Peers are dialled by IP address, so their certificates must hold
	// IP SANs (or set ServerName). Nil sends plain HTTP.
	TLS *tls.Config
	// Self is this node's member name, sent (and signed) as the sender of
	// every request: owners bound its refunds by what they lent to that
	// name. At most MaxMemberLen bytes. Empty sends none (owners then
	// account by the connection's IP address).
	Self string
	// MaxConnsPerPeer bounds the requests in flight to one peer.
	MaxConnsPerPeer int
	// QueueLen bounds the calls waiting for one peer; a call that finds
	// the queue full fails with ErrPeerUnavailable (the owner cannot keep
	// up: decide locally).
	QueueLen int
	// OnPlans, when not nil, receives the split plans of every reply that
	// carries some. It is called from the Forwarder's goroutines, possibly
	// concurrently, after the batch's callers have their results; it may
	// keep the slice, and should not block.
	OnPlans func([]shard.Plan)
	// Now and AfterFunc are the Forwarder's clock: when a peer's backoff
	// ends, when a request times out, the round trips its timeout adapts
	// to, and the times it signs and sends. Nil means the real clock
	// (time.Now, time.AfterFunc); tests pass a fake clock's. The request
	// itself (connection and reply, Timeout plus a second for a late
	// reply) is bounded by the real clock too: a reply that never comes
	// ends it even if a fake clock never moves.
	Now       func() time.Time
	AfterFunc func(d time.Duration, f func()) (stop func() bool)
	// Metrics is the set the Forwarder's metrics are registered in (the
	// per-peer sluice_forward_*_total{peer=...} counters and
	// sluice_forward_late_refunded_items_total). Nil means the process's
	// default set, which metrics.WritePrometheus writes: right for one
	// Forwarder per process; give each its own set when several share one
	// (a test cluster), or their counts mix.
	Metrics *metrics.Set
}

// DefaultConfig returns the configuration nodes use; zero fields of a
// Config take these values (fill). Why each:
func DefaultConfig() Config {
	return Config{
		// At a few thousand forwarded checks per second a batch still
		// holds several items, and 200µs is small next to a gateway's own
		// network hop.
		FlushInterval: 200 * time.Microsecond,
		MaxBatch:      256,
		// Stretching up to MaxTimeout (2 × Timeout) when the peer's
		// round trips are that slow. An owner whose Store fails waits up
		// to its check budget (lease.Config.CheckBudget; without one, the
		// Store's longest call) before it answers: a sender whose timeout
		// is shorter sheds checks the owner would have answered, so
		// sluiced refuses a timeout not above its check budget (20ms).
		Timeout: 50 * time.Millisecond,
		// A dead peer costs one timed-out batch per half second until
		// memberlist removes it from the ring (a few seconds), and a peer
		// that only paused is tried again soon.
		Backoff: 500 * time.Millisecond,
		// Enough requests in flight to keep batches full on a busy link,
		// few enough not to crowd a 2-core owner.
		MaxConnsPerPeer: 4,
		// More waiting calls than the concurrent checks of a node's HTTP
		// server.
		QueueLen: 4096,
	}
}

// Validate reports the first invalid field of c, by its configuration
// name. Zero fields are valid: they mean the default.
func (c Config) Validate() error {
	switch {
	case c.FlushInterval < 0:
		return fmt.Errorf("forward: flush_interval: must be ≥ 0, got %s", c.FlushInterval)
	case c.MaxBatch < 0 || c.MaxBatch > MaxItems:
		return fmt.Errorf("forward: max_batch: must be between 0 and %d, got %d", MaxItems, c.MaxBatch)
	case c.Timeout < 0:
		return fmt.Errorf("forward: timeout: must be ≥ 0, got %s", c.Timeout)
	case c.MaxTimeout < 0:
		return fmt.Errorf("forward: max_timeout: must be ≥ 0, got %s", c.MaxTimeout)
	case c.Backoff < 0:
		return fmt.Errorf("forward: backoff: must be ≥ 0, got %s", c.Backoff)
	case c.MaxConnsPerPeer < 0:
		return fmt.Errorf("forward: max_conns_per_peer: must be ≥ 0, got %d", c.MaxConnsPerPeer)
	case len(c.Self) > MaxMemberLen:
		return fmt.Errorf("forward: self: longer than %d bytes", MaxMemberLen)
	case c.QueueLen < 0:
		return fmt.Errorf("forward: queue_len: must be ≥ 0, got %d", c.QueueLen)
	}
	return nil
}

// fill replaces zero and invalid fields by their defaults.
func (c *Config) fill() {
	d := DefaultConfig()
	if c.FlushInterval <= 0 {
		c.FlushInterval = d.FlushInterval
	}
	if c.MaxBatch <= 0 || c.MaxBatch > MaxItems {
		c.MaxBatch = d.MaxBatch
	}
	if c.Timeout <= 0 {
		c.Timeout = d.Timeout
	}
	if c.MaxTimeout == 0 {
		c.MaxTimeout = 2 * c.Timeout
	}
	c.MaxTimeout = max(c.MaxTimeout, c.Timeout)
	if c.Backoff <= 0 {
		c.Backoff = d.Backoff
	}
	if c.MaxConnsPerPeer <= 0 {
		c.MaxConnsPerPeer = d.MaxConnsPerPeer
	}
	if c.QueueLen <= 0 {
		c.QueueLen = d.QueueLen
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.AfterFunc == nil {
		c.AfterFunc = func(d time.Duration, f func()) func() bool { return time.AfterFunc(d, f).Stop }
	}
	if c.Metrics == nil {
		c.Metrics = metrics.GetDefaultSet()
	}
}
