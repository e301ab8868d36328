package node

import (
	"crypto/tls"
	"errors"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"github.com/sluicehq/sluice/lease/logkey"
)

// tlsFailLog counts the TLS handshakes that fail on the HTTP port (a
// client speaking plain HTTP to it, a scanner, a certificate the client
// refuses) in sluice_http_tls_handshake_errors_total, and logs them at
// most one line a tlsFailEvery: the first at once, then the count since
// the last line with the next failure after the interval. They are the
// client's problem, not the node's: a warning, never an error, and a
// flood of them cannot flood the log.
type tlsFailLog struct {
	n   *Node
	met *metrics.Counter
	now func() time.Time

	mu      sync.Mutex
	last    time.Time // the last line
	pending int64     // failures since
}

// tlsFailEvery is the most one line about failed handshakes stands for.
const tlsFailEvery = 10 * time.Second

func newTLSFailLog(n *Node, set *metrics.Set) *tlsFailLog {
	return &tlsFailLog{n: n, met: set.NewCounter(`sluice_http_tls_handshake_errors_total`), now: time.Now}
}

// note counts a failed handshake and logs it if its interval has passed.
func (l *tlsFailLog) note(err error) {
	l.met.Inc()
	now := l.now()
	l.mu.Lock()
	l.pending++
	if !l.last.IsZero() && now.Sub(l.last) < tlsFailEvery {
		l.mu.Unlock()
		return
	}
	n := l.pending
	l.pending, l.last = 0, now
	l.mu.Unlock()
	l.n.log.Warn("TLS handshakes failed on the HTTP port (a client speaking plain HTTP or refusing the certificate)",
		"count", n, "per", tlsFailEvery.String(), "last_err", logkey.Quoted(err.Error()))
}

// isTLSHandshakeError reports whether err is a failed TLS handshake, as
// fasthttp reports it when it reads a request from a TLS listener.
func isTLSHandshakeError(err error) bool {
	var rh tls.RecordHeaderError
	var ae tls.AlertError
	var cv *tls.CertificateVerificationError
	if errors.As(err, &rh) || errors.As(err, &ae) || errors.As(err, &cv) {
		return true
	}
	var oe *net.OpError
	if errors.As(err, &oe) && (oe.Op == "remote error" || oe.Op == "local error") {
		return true
	}
	return strings.Contains(err.Error(), "tls: ")
}
