package forward

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"time"
	"unsafe"

	"github.com/sluicehq/sluice/lease"
	"github.com/sluicehq/sluice/node/api"
	"github.com/sluicehq/sluice/shard"
)

// Path is the internal endpoint the handler is mounted at.
const Path = "/internal/v1/batch"

// ContentType is the content type of batch and reply bodies.
const ContentType = "application/x-sluice-batch"

// Version is the wire format version written in the first byte of every
// body.
const Version = 1

// Bounds on bodies. A body that exceeds one is refused with an error that
// names the field.
const (
	// MaxItems bounds the items of one batch. Forwarders send at most
	// Config.MaxBatch (256); the margin lets a sender with a larger batch
	// size talk to an older owner.
	MaxItems = 4096
	// MaxBodyBytes bounds a batch or reply body (the server that mounts
	// the handler should set its MaxRequestBodySize at least this high).
	MaxBodyBytes = 4 << 20
	// MaxKeyLen bounds a key (the public API's bound).
	MaxKeyLen = api.MaxKeyLen
	// MaxRuleLen bounds a rule name (the public API's bound).
	MaxRuleLen = api.MaxRuleNameLen
	// MaxHits bounds the hits of one item (lease.MaxHits).
	MaxHits = lease.MaxHits
	// MaxErrorLen bounds a result's error message; longer messages are
	// truncated when encoded.
	MaxErrorLen = 512
	// MaxPlans bounds the plans of one reply.
	MaxPlans = 1024
	// MaxHolders bounds the holders of one plan.
	MaxHolders = 256
	// MaxMemberLen bounds a holder's member name.
	MaxMemberLen = 256
	// MaxPlanKeyLen bounds a plan's key: a counter key, rule ":" key.
	MaxPlanKeyLen = MaxRuleLen + 1 + MaxKeyLen
)

// Op is what an item asks of the owner.
type Op uint8

// The ops. The zero Op is invalid.
const (
	// OpCheck decides Hits against the rule's limit for the key.
	OpCheck Op = 1
	// OpRefund gives back Hits taken by an earlier check of the same rule
	// and key (a request another rule denied burns no quota).
	OpRefund Op = 2
)

func (o Op) String() string {
	switch o {
	case OpCheck:
		return "check"
	case OpRefund:
		return "refund"
	}
	return fmt.Sprintf("op(%d)", uint8(o))
}

// Item is one check or refund sent to a key's owner.
type Item struct {
	Op   Op
	Rule string // the rule's name, 1..MaxRuleLen bytes
	Key  string // the client's key within the rule, 1..MaxKeyLen bytes
	Hits int64  // 0..MaxHits; 0 peeks
}

// Result is the owner's answer to one item.
type Result struct {
	Allowed      bool
	Limit        int64
	Remaining    int64
	ResetMS      int64
	RetryAfterMS int64
	// Degraded and Unavailable are lease.Decision's.
	Degraded    bool
	Unavailable bool
	// Error, when not empty, means the owner could not decide the item
	// (a rule it does not know yet, say); the other fields are then zero
	// and the sender should decide the item itself, as after
	// ErrPeerUnavailable.
	Error string
}

// ResultOf converts a Manager's decision, rounding durations up to whole
// milliseconds so that a client that waits RetryAfterMS is never early.
func ResultOf(d lease.Decision) Result {
	return Result{
		Allowed:      d.Allowed,
		Limit:        d.Limit,
		Remaining:    d.Remaining,
		ResetMS:      ceilMS(d.Reset),
		RetryAfterMS: ceilMS(d.RetryAfter),
		Degraded:     d.Degraded,
		Unavailable:  d.Unavailable,
	}
}

// Decision converts r back to a lease.Decision. r.Error is not carried.
func (r Result) Decision() lease.Decision {
	return lease.Decision{
		Allowed:     r.Allowed,
		Limit:       r.Limit,
		Remaining:   r.Remaining,
		Reset:       time.Duration(r.ResetMS) * time.Millisecond,
		RetryAfter:  time.Duration(r.RetryAfterMS) * time.Millisecond,
		Degraded:    r.Degraded,
		Unavailable: r.Unavailable,
	}
}

func ceilMS(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}

// ErrMalformed means a batch or reply body is not a valid version-1
// encoding or exceeds a bound; the error names the item and field.
var ErrMalformed = errors.New("malformed forward body")

// Result flags.
const (
	flagAllowed     = 1 << 0
	flagDegraded    = 1 << 1
	flagUnavailable = 1 << 2
	flagError       = 1 << 3
	flagsKnown      = flagAllowed | flagDegraded | flagUnavailable | flagError
)

// checkItem reports whether it can be encoded, naming the field.
func checkItem(it *Item) error {
	switch {
	case it.Op != OpCheck && it.Op != OpRefund:
		return fmt.Errorf("op: unknown op %d", uint8(it.Op))
	case it.Rule == "":
		return errors.New("rule: empty")
	case len(it.Rule) > MaxRuleLen:
		return fmt.Errorf("rule: longer than %d bytes", MaxRuleLen)
	case it.Key == "":
		return errors.New("key: empty")
	case len(it.Key) > MaxKeyLen:
		return fmt.Errorf("key: longer than %d bytes", MaxKeyLen)
	case it.Hits < 0 || it.Hits > MaxHits:
		return fmt.Errorf("hits: must be between 0 and %d", int64(MaxHits))
	}
	return nil
}

// AppendItem appends the encoding of one item to dst, for a body that
// [AppendBatchHeader] starts. It returns an error naming the field when it
// is out of bounds, and dst unchanged.
func AppendItem(dst []byte, it *Item) ([]byte, error) {
	if err := checkItem(it); err != nil {
		return dst, err
	}
	return appendItem(dst, it), nil
}

func appendItem(dst []byte, it *Item) []byte {
	dst = append(dst, byte(it.Op))
	dst = appendString(dst, it.Rule)
	dst = appendString(dst, it.Key)
	return binary.AppendUvarint(dst, uint64(it.Hits))
}

// AppendBatchHeader appends the header of a batch of n items; the items'
// encodings ([AppendItem]) follow.
func AppendBatchHeader(dst []byte, n int) []byte {
	dst = append(dst, Version)
	return binary.AppendUvarint(dst, uint64(n))
}

// AppendBatch appends the body of a batch holding items. It returns an
// error naming the item and field if one is out of bounds.
func AppendBatch(dst []byte, items []Item) ([]byte, error) {
	if len(items) > MaxItems {
		return dst, fmt.Errorf("items: more than %d", MaxItems)
	}
	start := len(dst)
	dst = AppendBatchHeader(dst, len(items))
	for i := range items {
		if err := checkItem(&items[i]); err != nil {
			return dst[:start], fmt.Errorf("item %d: %w", i, err)
		}
		dst = appendItem(dst, &items[i])
	}
	return dst, nil
}

// DecodeBatch decodes a batch body, appending its items to dst[:0]. Keys
// and rule names are copied out of body (consecutive items with the same
// rule share one string), so body may be reused once it returns. Errors
// wrap [ErrMalformed] and name the item and field.
func DecodeBatch(dst []Item, body []byte) ([]Item, error) {
	return decodeBatch(dst, body, false)
}

// decodeBatch is DecodeBatch; with alias, the items' strings are views of
// body (valid while body is) and decoding allocates nothing.
func decodeBatch(dst []Item, body []byte, alias bool) ([]Item, error) {
	dst = dst[:0]
	d := decoder{b: body}
	n, err := d.header()
	if err != nil {
		return dst, err
	}
	if n > MaxItems {
		return dst, malformed("items: more than %d", MaxItems)
	}
	// Every item takes at least 4 bytes: refuse counts the body cannot
	// hold before allocating for them.
	if n > uint64(len(d.b))/4 {
		return dst, malformed("items: %d items in %d bytes", n, len(d.b))
	}
	dst = grow(dst, int(n))
	var lastRule string
	for i := 0; i < int(n); i++ {
		it := &dst[i]
		*it = Item{}
		op, ok := d.byte()
		if !ok {
			return dst[:0], malformed("item %d: op: truncated", i)
		}
		it.Op = Op(op)
		if it.Op != OpCheck && it.Op != OpRefund {
			return dst[:0], malformed("item %d: op: unknown op %d", i, op)
		}
		rule, err := d.bytes(1, MaxRuleLen)
		if err != nil {
			return dst[:0], malformed("item %d: rule: %v", i, err)
		}
		if string(rule) != lastRule {
			lastRule = str(rule, alias)
		}
		it.Rule = lastRule
		key, err := d.bytes(1, MaxKeyLen)
		if err != nil {
			return dst[:0], malformed("item %d: key: %v", i, err)
		}
		it.Key = str(key, alias)
		hits, err := d.uvarint()
		if err != nil {
			return dst[:0], malformed("item %d: hits: %v", i, err)
		}
		if hits > MaxHits {
			return dst[:0], malformed("item %d: hits: must be between 0 and %d", i, int64(MaxHits))
		}
		it.Hits = int64(hits)
	}
	if len(d.b) != 0 {
		return dst[:0], malformed("body: %d bytes after the last item", len(d.b))
	}
	return dst, nil
}

// AppendReply appends the body of a reply holding results, in the order
// of the batch's items, and plans. Error messages longer than MaxErrorLen
// are truncated. It returns an error naming the field if a plan is out of
// bounds (plans come from the node's own splitter, so that is a bug).
func AppendReply(dst []byte, results []Result, plans []shard.Plan) ([]byte, error) {
	if len(results) > MaxItems {
		return dst, fmt.Errorf("results: more than %d", MaxItems)
	}
	if len(plans) > MaxPlans {
		return dst, fmt.Errorf("plans: more than %d", MaxPlans)
	}
	start := len(dst)
	dst = append(dst, Version)
	dst = binary.AppendUvarint(dst, uint64(len(results)))
	for i := range results {
		r := &results[i]
		if r.Error != "" {
			dst = append(dst, flagError)
			dst = append(dst, 0, 0, 0, 0) // limit, remaining, reset, retry: 0
			msg := r.Error
			if len(msg) > MaxErrorLen {
				msg = msg[:MaxErrorLen]
			}
			dst = appendString(dst, msg)
			continue
		}
		if r.Limit < 0 || r.ResetMS < 0 || r.RetryAfterMS < 0 {
			return dst[:start], fmt.Errorf("result %d: limit, reset_ms and retry_after_ms must be ≥ 0", i)
		}
		var flags byte
		if r.Allowed {
			flags |= flagAllowed
		}
		if r.Degraded {
			flags |= flagDegraded
		}
		if r.Unavailable {
			flags |= flagUnavailable
		}
		dst = append(dst, flags)
		dst = binary.AppendUvarint(dst, uint64(r.Limit))
		dst = binary.AppendVarint(dst, r.Remaining)
		dst = binary.AppendUvarint(dst, uint64(r.ResetMS))
		dst = binary.AppendUvarint(dst, uint64(r.RetryAfterMS))
	}
	dst = binary.AppendUvarint(dst, uint64(len(plans)))
	for i := range plans {
		p := &plans[i]
		switch {
		case p.Key == "" || len(p.Key) > MaxPlanKeyLen:
			return dst[:start], fmt.Errorf("plan %d: key: must be 1..%d bytes", i, MaxPlanKeyLen)
		case len(p.Holders) > MaxHolders:
			return dst[:start], fmt.Errorf("plan %d: holders: more than %d", i, MaxHolders)
		}
		dst = appendString(dst, p.Key)
		dst = binary.AppendUvarint(dst, p.Epoch)
		dst = binary.AppendUvarint(dst, uint64(len(p.Holders)))
		for j, h := range p.Holders {
			if h == "" || len(h) > MaxMemberLen {
				return dst[:start], fmt.Errorf("plan %d: holder %d: must be 1..%d bytes", i, j, MaxMemberLen)
			}
			dst = appendString(dst, h)
		}
	}
	return dst, nil
}

// DecodeReply decodes a reply body, appending its results to results[:0]
// and its plans to plans[:0]. Error messages and plans are copied out of
// body. Errors wrap [ErrMalformed] and name the result or plan and field.
func DecodeReply(results []Result, plans []shard.Plan, body []byte) ([]Result, []shard.Plan, error) {
	results, plans = results[:0], plans[:0]
	d := decoder{b: body}
	n, err := d.header()
	if err != nil {
		return results, plans, err
	}
	if n > MaxItems {
		return results, plans, malformed("results: more than %d", MaxItems)
	}
	if n > uint64(len(d.b))/5 { // a result takes at least 5 bytes
		return results, plans, malformed("results: %d results in %d bytes", n, len(d.b))
	}
	results = grow(results, int(n))
	for i := 0; i < int(n); i++ {
		if err := d.result(&results[i]); err != nil {
			return results[:0], plans, malformed("result %d: %v", i, err)
		}
	}
	np, err := d.uvarint()
	if err != nil {
		return results[:0], plans, malformed("plans: %v", err)
	}
	if np > MaxPlans {
		return results[:0], plans, malformed("plans: more than %d", MaxPlans)
	}
	if np > uint64(len(d.b))/3 { // a plan takes at least 3 bytes
		return results[:0], plans, malformed("plans: %d plans in %d bytes", np, len(d.b))
	}
	for i := 0; i < int(np); i++ {
		var p shard.Plan
		key, err := d.bytes(1, MaxPlanKeyLen)
		if err != nil {
			return results[:0], plans[:0], malformed("plan %d: key: %v", i, err)
		}
		p.Key = string(key)
		if p.Epoch, err = d.uvarint(); err != nil {
			return results[:0], plans[:0], malformed("plan %d: epoch: %v", i, err)
		}
		nh, err := d.uvarint()
		if err != nil {
			return results[:0], plans[:0], malformed("plan %d: holders: %v", i, err)
		}
		if nh > MaxHolders {
			return results[:0], plans[:0], malformed("plan %d: holders: more than %d", i, MaxHolders)
		}
		if nh > uint64(len(d.b))/2 {
			return results[:0], plans[:0], malformed("plan %d: holders: %d holders in %d bytes", i, nh, len(d.b))
		}
		if nh > 0 {
			p.Holders = make([]string, nh)
		}
		for j := range p.Holders {
			h, err := d.bytes(1, MaxMemberLen)
			if err != nil {
				return results[:0], plans[:0], malformed("plan %d: holder %d: %v", i, j, err)
			}
			p.Holders[j] = string(h)
		}
		plans = append(plans, p)
	}
	if len(d.b) != 0 {
		return results[:0], plans[:0], malformed("body: %d bytes after the last plan", len(d.b))
	}
	return results, plans, nil
}

// str returns b as a string: a copy, or with alias a view of b.
func str(b []byte, alias bool) string {
	if alias {
		return unsafe.String(unsafe.SliceData(b), len(b))
	}
	return string(b)
}

func malformed(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrMalformed}, args...)...)
}

func appendString(dst []byte, s string) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(s)))
	return append(dst, s...)
}

// grow returns s with length n, reusing its array when it is large enough.
func grow[T any](s []T, n int) []T {
	if cap(s) >= n {
		return s[:n]
	}
	return make([]T, n)
}

// decoder reads a body from the front.
type decoder struct{ b []byte }

var (
	errTruncated = errors.New("truncated")
	errVarint    = errors.New("bad varint")
)

func (d *decoder) header() (uint64, error) {
	v, ok := d.byte()
	if !ok {
		return 0, malformed("version: empty body")
	}
	if v != Version {
		return 0, malformed("version: got %d, want %d", v, Version)
	}
	n, err := d.uvarint()
	if err != nil {
		return 0, malformed("count: %v", err)
	}
	return n, nil
}

func (d *decoder) byte() (byte, bool) {
	if len(d.b) == 0 {
		return 0, false
	}
	c := d.b[0]
	d.b = d.b[1:]
	return c, true
}

func (d *decoder) uvarint() (uint64, error) {
	v, n := binary.Uvarint(d.b)
	if n == 0 {
		return 0, errTruncated
	}
	if n < 0 {
		return 0, errVarint
	}
	d.b = d.b[n:]
	return v, nil
}

// int63 reads an unsigned varint that must fit an int64.
func (d *decoder) int63() (int64, error) {
	v, err := d.uvarint()
	if err != nil {
		return 0, err
	}
	if v > math.MaxInt64 {
		return 0, errors.New("out of range")
	}
	return int64(v), nil
}

// bytes reads a length-prefixed string of min..max bytes; the result
// aliases the body.
func (d *decoder) bytes(min, max int) ([]byte, error) {
	n, err := d.uvarint()
	if err != nil {
		return nil, err
	}
	if n < uint64(min) || n > uint64(max) {
		return nil, fmt.Errorf("length %d, want %d..%d", n, min, max)
	}
	if uint64(len(d.b)) < n {
		return nil, errTruncated
	}
	s := d.b[:n]
	d.b = d.b[n:]
	return s, nil
}

func (d *decoder) result(r *Result) error {
	*r = Result{}
	flags, ok := d.byte()
	if !ok {
		return fmt.Errorf("flags: %w", errTruncated)
	}
	if flags&^flagsKnown != 0 {
		return fmt.Errorf("flags: unknown flags %#x", flags)
	}
	if flags&flagError != 0 && flags != flagError {
		return fmt.Errorf("flags: error with other flags %#x", flags)
	}
	r.Allowed = flags&flagAllowed != 0
	r.Degraded = flags&flagDegraded != 0
	r.Unavailable = flags&flagUnavailable != 0
	var err error
	if r.Limit, err = d.int63(); err != nil {
		return fmt.Errorf("limit: %w", err)
	}
	v, n := binary.Varint(d.b)
	if n <= 0 {
		return fmt.Errorf("remaining: %w", errVarint)
	}
	d.b = d.b[n:]
	r.Remaining = v
	if r.ResetMS, err = d.int63(); err != nil {
		return fmt.Errorf("reset_ms: %w", err)
	}
	if r.RetryAfterMS, err = d.int63(); err != nil {
		return fmt.Errorf("retry_after_ms: %w", err)
	}
	if flags&flagError != 0 {
		if r.Limit != 0 || r.Remaining != 0 || r.ResetMS != 0 || r.RetryAfterMS != 0 {
			return errors.New("error: result with an error has non-zero fields")
		}
		msg, err := d.bytes(1, MaxErrorLen)
		if err != nil {
			return fmt.Errorf("error: %w", err)
		}
		r.Error = string(msg)
	}
	return nil
}
