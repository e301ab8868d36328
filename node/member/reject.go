package member

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/VictoriaMetrics/metrics"
)

// rejectLogEvery is how often at most a line about refused gossip is
// logged: anyone who reaches the gossip port can send packets that fail
// to decrypt, and one line each would let a stranger flood the log.
const rejectLogEvery = 10 * time.Second

// rejectedPrefixes start memberlist's lines about a packet or stream it
// refused before (or while) reading it: it did not decrypt (a stranger,
// or a node with another cluster key), carried a label or a message type
// memberlist does not accept, or did not decode.
var rejectedPrefixes = [...]string{
	"memberlist: Decrypt packet failed",
	"memberlist: failed to receive",
	"memberlist: Failed to receive",
	"memberlist: discarding packet with unacceptable label",
	"memberlist: discarding stream with unacceptable label",
	"memberlist: unexpected double packet label header",
	"memberlist: unexpected double stream label header",
	"memberlist: missing message type byte",
	"memberlist: msg type (",
	"memberlist: Message type (",
	"memberlist: Received invalid msgType",
	"memberlist: Got invalid checksum for UDP packet",
	"memberlist: Failed to decode",
	"memberlist: Failed to decompress payload",
	"memberlist: Failed to read remote state",
	"memberlist: Got ping for unexpected node",
}

// MetricsHelp returns the # HELP text of each metric family membership
// registers, by family name: what it counts. A node's /metrics writes
// them (node combines every package's).
func MetricsHelp() map[string]string {
	return map[string]string{
		"sluice_gossip_rejected_packets_total": "Gossip packets and streams refused: not decryptable with the cluster key (a stranger, or a node with another key), a bad label or message type, or undecodable.",
	}
}

// rejectLog logs memberlist's lines about refused gossip at most once
// every rejectLogEvery, each logged line saying how many were suppressed
// since the last one, and counts every one in
// sluice_gossip_rejected_packets_total. Safe for concurrent use.
type rejectLog struct {
	l        *slog.Logger
	now      func() time.Time
	rejected *metrics.Counter

	mu struct {
		sync.Mutex
		last       time.Time // when the last line was logged; zero: never
		suppressed int       // lines not logged since
	}
}

func newRejectLog(l *slog.Logger, now func() time.Time, set *metrics.Set) *rejectLog {
	return &rejectLog{
		l:        l,
		now:      now,
		rejected: set.GetOrCreateCounter("sluice_gossip_rejected_packets_total"),
	}
}

// handle logs msg, a memberlist line without its level tag, at level if
// it is about refused gossip and the interval allows; it reports whether
// msg was such a line (logged or suppressed).
func (r *rejectLog) handle(level slog.Level, msg string) bool {
	if !rejected(msg) {
		return false
	}
	defer r.rejected.Inc() // after the line: a count seen means its line is written
	now := r.now()
	r.mu.Lock()
	if !r.mu.last.IsZero() && now.Sub(r.mu.last) < rejectLogEvery {
		r.mu.suppressed++
		r.mu.Unlock()
		return true
	}
	suppressed := r.mu.suppressed
	r.mu.last, r.mu.suppressed = now, 0
	r.mu.Unlock()
	r.l.Log(context.Background(), level, msg+" (gossip refused; logged at most every 10s)", "suppressed", suppressed)
	return true
}

func rejected(msg string) bool {
	for _, p := range rejectedPrefixes {
		if strings.HasPrefix(msg, p) {
			return true
		}
	}
	return false
}
