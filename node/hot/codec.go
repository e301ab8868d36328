package hot

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/sluicehq/sluice/lease/logkey"
	"github.com/sluicehq/sluice/node/api"
	"github.com/sluicehq/sluice/shard"
)

// Gossip message format. See the package doc, "Gossip messages".
const (
	// MsgKind is the first byte of every hot-key gossip message, so that
	// the node can share its gossip channel with other message kinds
	// ([IsPlans]).
	MsgKind byte = 'H'
	// Version is the format version, the second byte of every message.
	Version byte = 1
	// MaxMessageSize bounds one message: a gossip message must fit, with
	// memberlist's framing and encryption, in one UDP packet
	// (node/member.MaxMessageSize).
	MaxMessageSize = 1200
	// MaxKeyLen bounds a plan's key: a counter key, rule ":" key.
	MaxKeyLen = api.MaxRuleNameLen + 1 + api.MaxKeyLen
	// MaxHolders bounds the holders of one plan.
	MaxHolders = 256
	// MaxMemberLen bounds a holder's member name.
	MaxMemberLen = 256
	// maxPlansPerMessage bounds the plans of one message: the smallest
	// plan takes 4 bytes.
	maxPlansPerMessage = MaxMessageSize / 4
)

// ErrMalformed means a gossip message is not a valid hot-key message: the
// wrapping error names the plan and field.
var ErrMalformed = errors.New("malformed hot-key message")

// ErrTooLarge means a plan cannot fit in one gossip message (a long key
// with many long member names); it still reaches senders in forwarding
// replies.
var ErrTooLarge = errors.New("plan too large for a gossip message")

// IsPlans reports whether msg is a hot-key message (of any version): the
// node's gossip callback hands those to [Hot.Receive].
func IsPlans(msg []byte) bool { return len(msg) >= 1 && msg[0] == MsgKind }

// AppendPlans appends one message holding plans to dst. It returns an
// error naming the plan and field if a plan is out of bounds (empty key,
// zero epoch, empty or too-long holder...), or wrapping [ErrTooLarge] if
// the message would exceed [MaxMessageSize]; dst is then returned
// unchanged.
func AppendPlans(dst []byte, plans []shard.Plan) ([]byte, error) {
	start := len(dst)
	if len(plans) > maxPlansPerMessage {
		return dst, fmt.Errorf("plans: %w: more than %d plans", ErrTooLarge, maxPlansPerMessage)
	}
	dst = append(dst, MsgKind, Version)
	dst = binary.AppendUvarint(dst, uint64(len(plans)))
	for i := range plans {
		var err error
		if dst, err = appendPlan(dst, &plans[i]); err != nil {
			return dst[:start], fmt.Errorf("plan %d: %w", i, err)
		}
	}
	if len(dst)-start > MaxMessageSize {
		return dst[:start], fmt.Errorf("message: %w: %d bytes, at most %d", ErrTooLarge, len(dst)-start, MaxMessageSize)
	}
	return dst, nil
}

func appendPlan(dst []byte, p *shard.Plan) ([]byte, error) {
	switch {
	case p.Key == "" || len(p.Key) > MaxKeyLen:
		return dst, fmt.Errorf("key: must be 1..%d bytes, got %d", MaxKeyLen, len(p.Key))
	case p.Epoch == 0:
		return dst, errors.New("epoch: must be > 0")
	case len(p.Holders) > MaxHolders:
		return dst, fmt.Errorf("holders: more than %d", MaxHolders)
	}
	dst = appendString(dst, p.Key)
	dst = binary.AppendUvarint(dst, p.Epoch)
	dst = binary.AppendUvarint(dst, uint64(len(p.Holders)))
	for j, h := range p.Holders {
		if h == "" || len(h) > MaxMemberLen {
			return dst, fmt.Errorf("holder %d: must be 1..%d bytes, got %d", j, MaxMemberLen, len(h))
		}
		for k := range j {
			if p.Holders[k] == h {
				return dst, fmt.Errorf("holder %d: duplicate of holder %d", j, k)
			}
		}
		dst = appendString(dst, h)
	}
	return dst, nil
}

func appendString(dst []byte, s string) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(s)))
	return append(dst, s...)
}

// EncodePlans packs plans into as few messages of at most
// [MaxMessageSize] bytes as it can, in order. A plan that cannot be
// encoded (out of bounds, or too large for a message on its own) is left
// out; errs holds one error per such plan, naming it.
func EncodePlans(plans []shard.Plan) (msgs [][]byte, errs []error) {
	var cur []byte // the message being filled
	n := 0         // its plans
	var one []byte // scratch: one plan
	flush := func() {
		if n == 0 {
			return
		}
		msg := append([]byte{MsgKind, Version}, binary.AppendUvarint(nil, uint64(n))...)
		msgs = append(msgs, append(msg, cur...))
		cur, n = nil, 0
	}
	for i := range plans {
		var err error
		one, err = appendPlan(one[:0], &plans[i])
		if err != nil {
			errs = append(errs, fmt.Errorf("plan %s: %w", logkey.String(plans[i].Key), err))
			continue
		}
		if headerLen+len(one) > MaxMessageSize {
			errs = append(errs, fmt.Errorf("plan %s: %w: %d bytes", logkey.String(plans[i].Key), ErrTooLarge, len(one)))
			continue
		}
		if headerLen+len(cur)+len(one) > MaxMessageSize || n == maxPlansPerMessage {
			flush()
		}
		cur = append(cur, one...)
		n++
	}
	flush()
	return msgs, errs
}

// headerLen is the longest header of a message: kind, version and a
// count below 2^14 (two varint bytes).
const headerLen = 4

// DecodePlans decodes a message, appending its plans to dst[:0]. Keys and
// holders are copied out of msg. Errors wrap [ErrMalformed] and name the
// plan and field; a message of another kind or version is refused.
func DecodePlans(dst []shard.Plan, msg []byte) ([]shard.Plan, error) {
	dst = dst[:0]
	switch {
	case len(msg) < 3:
		return dst, malformed("message: %d bytes, too short", len(msg))
	case len(msg) > MaxMessageSize:
		return dst, malformed("message: %d bytes, at most %d", len(msg), MaxMessageSize)
	case msg[0] != MsgKind:
		return dst, malformed("kind: %#x, want %#x", msg[0], MsgKind)
	case msg[1] != Version:
		return dst, malformed("version: %d, want %d", msg[1], Version)
	}
	d := decoder{b: msg[2:]}
	n, err := d.uvarint()
	if err != nil {
		return dst, malformed("count: %v", err)
	}
	if n > uint64(len(d.b))/4 { // a plan takes at least 4 bytes
		return dst, malformed("count: %d plans in %d bytes", n, len(d.b))
	}
	for i := 0; i < int(n); i++ {
		var p shard.Plan
		key, err := d.bytes(MaxKeyLen)
		if err != nil {
			return dst[:0], malformed("plan %d: key: %v", i, err)
		}
		p.Key = string(key)
		if p.Epoch, err = d.uvarint(); err != nil {
			return dst[:0], malformed("plan %d: epoch: %v", i, err)
		}
		if p.Epoch == 0 {
			return dst[:0], malformed("plan %d: epoch: must be > 0", i)
		}
		nh, err := d.uvarint()
		if err != nil {
			return dst[:0], malformed("plan %d: holders: %v", i, err)
		}
		if nh > MaxHolders {
			return dst[:0], malformed("plan %d: holders: more than %d", i, MaxHolders)
		}
		if nh > uint64(len(d.b))/2 { // a holder takes at least 2 bytes
			return dst[:0], malformed("plan %d: holders: %d holders in %d bytes", i, nh, len(d.b))
		}
		if nh > 0 {
			p.Holders = make([]string, nh)
		}
		for j := range p.Holders {
			h, err := d.bytes(MaxMemberLen)
			if err != nil {
				return dst[:0], malformed("plan %d: holder %d: %v", i, j, err)
			}
			p.Holders[j] = string(h)
			for k := range j {
				if p.Holders[k] == p.Holders[j] {
					return dst[:0], malformed("plan %d: holder %d: duplicate of holder %d", i, j, k)
				}
			}
		}
		dst = append(dst, p)
	}
	if len(d.b) != 0 {
		return dst[:0], malformed("message: %d bytes after the last plan", len(d.b))
	}
	return dst, nil
}

func malformed(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrMalformed, fmt.Sprintf(format, args...))
}

type decoder struct{ b []byte }

func (d *decoder) uvarint() (uint64, error) {
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		if n == 0 {
			return 0, errors.New("truncated")
		}
		return 0, errors.New("varint overflows 64 bits")
	}
	d.b = d.b[n:]
	return v, nil
}

// bytes reads a length-prefixed string of 1..max bytes.
func (d *decoder) bytes(max int) ([]byte, error) {
	n, err := d.uvarint()
	if err != nil {
		return nil, err
	}
	if n == 0 || n > uint64(max) {
		return nil, fmt.Errorf("must be 1..%d bytes, got %d", max, n)
	}
	if n > uint64(len(d.b)) {
		return nil, fmt.Errorf("%d bytes announced, %d left", n, len(d.b))
	}
	b := d.b[:n]
	d.b = d.b[n:]
	return b, nil
}
