package forward

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"strconv"
	"sync"
	"time"
)

// AuthHeader carries the signature of an internal request (see the
// package doc, "Authentication").
const AuthHeader = "X-Sluice-Auth"

// FromHeader carries the sender's member name (covered by the signature):
// the owner bounds the peer's refunds by what it lent that name.
const FromHeader = "X-Sluice-From"

// ReplyAuthHeader carries the owner's signature of its reply.
const ReplyAuthHeader = "X-Sluice-Reply-Auth"

// DeadlineAuthHeader carries the signature of a request's DeadlineHeader
// value, bound to the request's nonce (see the package doc,
// "Authentication"). It is a header of its own, beside AuthHeader's MAC
// rather than inside it, so that nodes of the previous release, which
// check AuthHeader without the deadline, still accept a newer node's
// requests during a rolling upgrade.
const DeadlineAuthHeader = "X-Sluice-Deadline-Auth"

// Signature bounds and defaults.
const (
	// NonceLen is the bytes of a request's random nonce.
	NonceLen = 16
	// DefaultWindow is how far a request's timestamp may be from the
	// owner's clock (either way): nodes' clocks are NTP-synchronised to
	// well under a second, and a request older than a forward timeout
	// (50ms) is never legitimately in flight.
	DefaultWindow = 30 * time.Second
	// DefaultMaxNonces bounds the nonces an owner remembers per window
	// (about 2 × window of traffic is kept): 1<<19 nonces is 17,000
	// internal requests a second from all peers for 30 s, in about 40
	// MiB at worst. Requests beyond it are refused (503: the senders
	// decide locally) rather than remembered less, which would let
	// replays through.
	DefaultMaxNonces = 1 << 19
)

// Errors of verification. They wrap ErrAuth.
var (
	// ErrAuth means an internal request's signature is missing, malformed
	// or wrong, its timestamp is outside the window, or its nonce was
	// seen before: the handler answers 401.
	ErrAuth = errors.New("internal request not authenticated")

	errNoAuth    = fmt.Errorf("%w: missing %s", ErrAuth, AuthHeader)
	errAuthForm  = fmt.Errorf("%w: %s: want <unix ms>.<32 hex nonce>.<64 hex HMAC>", ErrAuth, AuthHeader)
	errSignature = fmt.Errorf("%w: wrong signature (another cluster key, or a modified request)", ErrAuth)
	errReplay    = fmt.Errorf("%w: nonce seen before (a replayed request)", ErrAuth)
	errStale     = fmt.Errorf("%w: timestamp outside the acceptance window", ErrAuth)
)

// signatureContext separates these MACs from any other use of the key.
const (
	requestContext  = "sluice-internal-v1 request"
	replyContext    = "sluice-internal-v1 reply"
	deadlineContext = "sluice-internal-v1 deadline"
)

// signer computes the MACs of one cluster key; nil when there is none. It
// is safe for concurrent use (the HMAC states are pooled).
type signer struct {
	states sync.Pool // *macState
}

// macState is one HMAC-SHA256 keyed with the cluster key, and the
// buffers to feed it without allocating.
type macState struct {
	mac hash.Hash
	buf []byte            // the length-prefixed fields before the body
	sum [sha256.Size]byte // the last MAC
}

func newSigner(key []byte) *signer {
	if len(key) == 0 {
		return nil
	}
	k := append([]byte(nil), key...)
	s := &signer{}
	s.states.New = func() any { return &macState{mac: hmac.New(sha256.New, k)} }
	return s
}

// appendField appends a length-prefixed field, so that no two different
// field lists hash the same bytes.
func appendField[T string | []byte](dst []byte, f T) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(f)))
	return append(dst, f...)
}

// finish hashes st.buf then body (length-prefixed) and appends the MAC to
// dst.
func (s *signer) finish(st *macState, dst, body []byte) []byte {
	st.buf = binary.AppendUvarint(st.buf, uint64(len(body)))
	st.mac.Reset()
	st.mac.Write(st.buf)
	st.mac.Write(body)
	dst = append(dst, st.mac.Sum(st.sum[:0])...)
	s.states.Put(st)
	return dst
}

// requestMAC is HMAC(key, context | method | path | from | ts | nonce |
// body), each field length-prefixed, appended to dst.
func (s *signer) requestMAC(dst []byte, method, path, from string, ts int64, nonce *[NonceLen]byte, body []byte) []byte {
	st := s.states.Get().(*macState)
	st.buf = appendField(st.buf[:0], requestContext)
	st.buf = appendField(st.buf, method)
	st.buf = appendField(st.buf, path)
	st.buf = appendField(st.buf, from)
	st.buf = append(st.buf, 8)
	st.buf = binary.BigEndian.AppendUint64(st.buf, uint64(ts))
	st.buf = appendField(st.buf, nonce[:])
	return s.finish(st, dst, body)
}

// replyMAC is HMAC(key, context | request nonce | body): it binds a reply
// to the request it answers.
func (s *signer) replyMAC(dst []byte, nonce *[NonceLen]byte, body []byte) []byte {
	st := s.states.Get().(*macState)
	st.buf = appendField(st.buf[:0], replyContext)
	st.buf = appendField(st.buf, nonce[:])
	return s.finish(st, dst, body)
}

// deadlineMAC is HMAC(key, context | request nonce | DeadlineHeader
// value): the nonce is covered by the request's MAC and never reused, so
// a deadline's MAC holds for the one request it was sent with.
func (s *signer) deadlineMAC(dst []byte, nonce *[NonceLen]byte, deadline []byte) []byte {
	st := s.states.Get().(*macState)
	st.buf = appendField(st.buf[:0], deadlineContext)
	st.buf = appendField(st.buf, nonce[:])
	return s.finish(st, dst, deadline)
}

// appendDeadlineAuth appends the DeadlineAuthHeader value of a request
// with nonce and DeadlineHeader value deadline: the hex MAC.
func (s *signer) appendDeadlineAuth(dst []byte, nonce *[NonceLen]byte, deadline []byte) []byte {
	var mac [sha256.Size]byte
	return hex.AppendEncode(dst, s.deadlineMAC(mac[:0], nonce, deadline))
}

// errDeadlineSignature means a request's DeadlineAuthHeader does not sign
// its DeadlineHeader: the deadline was changed on the way (401).
var errDeadlineSignature = fmt.Errorf("%w: wrong %s (a modified %s)", ErrAuth, DeadlineAuthHeader, DeadlineHeader)

// verifyDeadline checks a request's DeadlineAuthHeader value hdr against
// its nonce and DeadlineHeader value deadline. trusted reports whether
// the deadline may be used: false with a nil error when the request has
// no deadline or no DeadlineAuthHeader (a sender of the previous release:
// its deadline is ignored, as if absent); an error when hdr is present but
// does not sign deadline.
func (s *signer) verifyDeadline(hdr []byte, nonce *[NonceLen]byte, deadline []byte) (trusted bool, err error) {
	if len(hdr) == 0 {
		return false, nil
	}
	var got, want [sha256.Size]byte
	if len(hdr) != 2*sha256.Size {
		return false, errDeadlineSignature
	}
	if _, err := hex.Decode(got[:], hdr); err != nil {
		return false, errDeadlineSignature
	}
	if !hmac.Equal(s.deadlineMAC(want[:0], nonce, deadline), got[:]) {
		return false, errDeadlineSignature
	}
	return len(deadline) > 0, nil
}

// newNonce returns a random nonce.
func newNonce() (n [NonceLen]byte) {
	// crypto/rand.Read never fails (Go 1.24+): it crashes the program
	// rather than return predictable bytes.
	_, _ = rand.Read(n[:])
	return n
}

// appendAuth appends the value of AuthHeader for a request signed at ts
// (Unix milliseconds) with nonce: "<ts>.<hex nonce>.<hex MAC>".
func (s *signer) appendAuth(dst []byte, method, path, from string, ts int64, nonce *[NonceLen]byte, body []byte) []byte {
	dst = strconv.AppendInt(dst, ts, 10)
	dst = append(dst, '.')
	dst = hex.AppendEncode(dst, nonce[:])
	dst = append(dst, '.')
	var mac [sha256.Size]byte
	return hex.AppendEncode(dst, s.requestMAC(mac[:0], method, path, from, ts, nonce, body))
}

// errReplyAuth means a reply's signature is missing or wrong: the sender
// treats the owner as unavailable and decides the items itself.
var errReplyAuth = fmt.Errorf("reply not authenticated: missing or wrong %s", ReplyAuthHeader)

// verifyReply checks a reply's ReplyAuthHeader value against the nonce of
// the request it answers and its body.
func (s *signer) verifyReply(hdr []byte, nonce *[NonceLen]byte, body []byte) error {
	var got, want [sha256.Size]byte
	if len(hdr) != 2*sha256.Size {
		return errReplyAuth
	}
	if _, err := hex.Decode(got[:], hdr); err != nil {
		return errReplyAuth
	}
	if !hmac.Equal(s.replyMAC(want[:0], nonce, body), got[:]) {
		return errReplyAuth
	}
	return nil
}

// parsedAuth is a parsed AuthHeader value.
type parsedAuth struct {
	ts    int64 // Unix milliseconds
	nonce [NonceLen]byte
	mac   [sha256.Size]byte
}

// parseAuth parses an AuthHeader value. It never panics and allocates
// nothing.
func parseAuth(v []byte) (parsedAuth, error) {
	var a parsedAuth
	if len(v) == 0 {
		return a, errNoAuth
	}
	const tail = 1 + 2*NonceLen + 1 + 2*sha256.Size
	if len(v) <= tail || len(v) > tail+19 {
		return a, errAuthForm
	}
	tsPart, rest := v[:len(v)-tail], v[len(v)-tail:]
	if rest[0] != '.' || rest[1+2*NonceLen] != '.' {
		return a, errAuthForm
	}
	var ts int64
	for _, c := range tsPart {
		if c < '0' || c > '9' {
			return a, errAuthForm
		}
		ts = ts*10 + int64(c-'0') // at most 19 digits: may wrap, then fails the window
	}
	if ts < 0 {
		return a, errAuthForm
	}
	a.ts = ts
	if _, err := hex.Decode(a.nonce[:], rest[1:1+2*NonceLen]); err != nil {
		return a, errAuthForm
	}
	if _, err := hex.Decode(a.mac[:], rest[2+2*NonceLen:]); err != nil {
		return a, errAuthForm
	}
	return a, nil
}

// verify checks a request's AuthHeader value against its method, path,
// FromHeader value and body, and its timestamp against now and window. It returns the
// parsed header (for the nonce check and the reply) and, on failure, an
// error wrapping ErrAuth; a request correctly signed but outside the
// window fails with errStale, and skew is how far its timestamp is from
// now. It is pure: the nonce cache is the caller's.
func (s *signer) verify(hdr []byte, method, path, from string, body []byte, now time.Time, window time.Duration) (a parsedAuth, skew time.Duration, err error) {
	a, err = parseAuth(hdr)
	if err != nil {
		return a, 0, err
	}
	var mac [sha256.Size]byte
	if !hmac.Equal(s.requestMAC(mac[:0], method, path, from, a.ts, &a.nonce, body), a.mac[:]) {
		return a, 0, errSignature
	}
	skew = now.Sub(time.UnixMilli(a.ts))
	if skew > window || skew < -window {
		return a, skew, errStale
	}
	return a, skew, nil
}

// nonceCache remembers the nonces of accepted requests for at least
// 2 × window, in two generations swapped every 2 × window: a request is
// accepted at most window away from its timestamp, so a nonce first seen
// up to window before its timestamp must be kept until window after it.
// It is safe for concurrent use.
type nonceCache struct {
	period time.Duration // 2 × window
	max    int           // nonces per generation

	mu struct {
		sync.Mutex
		cur, prev map[[NonceLen]byte]struct{}
		since     time.Time // when cur started
	}
}

func newNonceCache(window time.Duration, max int) *nonceCache {
	c := &nonceCache{period: 2 * window, max: max}
	c.mu.cur = make(map[[NonceLen]byte]struct{})
	c.mu.prev = make(map[[NonceLen]byte]struct{})
	return c
}

// errNonceCacheFull means too many requests arrived in one period to
// remember their nonces: the request is refused (503).
var errNonceCacheFull = errors.New("too many internal requests to remember their nonces: refused")

// add records nonce at now; it fails with errReplay if the nonce was seen
// and with errNonceCacheFull when the current generation is full.
func (c *nonceCache) add(nonce *[NonceLen]byte, now time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.mu.since.IsZero() {
		c.mu.since = now
	}
	if el := now.Sub(c.mu.since); el >= c.period {
		// cur's nonces were added less than period after since (or it
		// would have been rotated then): after 2 × period both
		// generations are older than period and go.
		old := c.mu.prev
		clear(old)
		if el >= 2*c.period {
			clear(c.mu.cur)
		} else {
			c.mu.prev, c.mu.cur = c.mu.cur, old
		}
		c.mu.since = now
	}
	if _, ok := c.mu.cur[*nonce]; ok {
		return errReplay
	}
	if _, ok := c.mu.prev[*nonce]; ok {
		return errReplay
	}
	if len(c.mu.cur) >= c.max {
		return errNonceCacheFull
	}
	c.mu.cur[*nonce] = struct{}{}
	return nil
}
