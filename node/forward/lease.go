package forward

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/sluicehq/sluice/lease"
	"github.com/sluicehq/sluice/node/api"
	"github.com/sluicehq/sluice/node/engine"
)

// Lease ops (wire format version 2): a node sends the lease protocol's
// ops of keys it does not own to their owner (engine.Engine.Lease), on
// the same endpoint and with the same signatures as checks, one request
// per call (a holder sends its ops to their owners itself, so these are
// few: only those of a holder whose view of the ring is behind). The
// owner applies them with engine.Engine.DecideOwnedLeases. A batch of
// version 2 holds only lease ops; an owner of the previous release
// answers it 400 (unknown version), and the sender treats the ops as
// unanswered.
//
//	batch:  version=2 | count | count × op
//	op:     kind (1 lease, 2 return, 3 peek) | rule | key | holder | region |
//	        flags (1 first) | want | need | tokens | demand | held | ttl_ms |
//	        spent_before | idle_ms | call | unanswered | ahead_windows |
//	        ahead_tokens
//	reply:  version=2 | count | count × result
//	result: flags (1 error, 2 checked, 4 crowded) | granted | remaining |
//	        wait_ms | reset_ms | lent | ahead_tokens | ahead_windows | [error]
//
// Holder is the holder's Store id (a public id, never its secret); the
// lessee's MaxHolders is the owner's rule's, never sent.

// LeaseVersion is the wire format version of lease batches.
const LeaseVersion = 2

// MaxLeaseOps bounds the ops of one lease batch (api.MaxLeaseOps).
const MaxLeaseOps = 1000

// Lease result flags.
const (
	leaseFlagError   = 1 << 0
	leaseFlagChecked = 1 << 1
	leaseFlagCrowded = 1 << 2
	leaseFlagsKnown  = leaseFlagError | leaseFlagChecked | leaseFlagCrowded
)

// LeaseDecider applies the lease ops a peer forwarded (the node
// implements it with engine.Engine.DecideOwnedLeases). Like Decider, it
// is called concurrently with views of the request body.
type LeaseDecider interface {
	DecideLeases(ops []engine.LeaseOp, results []engine.LeaseResult)
}

// ForwardLeases has the owner at addr apply ops (their keys' owner) and
// fills results. It waits until ctx ends at the most (a lease op may
// wait on the owner's Store). An error means no result came back: the
// owner may have applied some of the ops.
func (f *Forwarder) ForwardLeases(ctx context.Context, addr string, ops []engine.LeaseOp, results []engine.LeaseResult) error {
	if len(results) != len(ops) {
		return fmt.Errorf("cannot forward: results: length %d, want %d (one per op)", len(results), len(ops))
	}
	if len(ops) == 0 {
		return nil
	}
	body, err := AppendLeaseBatch(nil, ops)
	if err != nil {
		return fmt.Errorf("cannot forward: %w", err)
	}
	p, err := f.peer(addr)
	if err != nil {
		return err
	}
	limit := p.f.cfg.MaxTimeout
	if dl, ok := ctx.Deadline(); ok {
		limit = time.Until(dl)
	}
	if limit <= 0 {
		return fmt.Errorf("%w: %s: %w", ErrPeerUnavailable, addr, context.DeadlineExceeded)
	}
	resp := fasthttp.AcquireResponse()
	defer fasthttp.ReleaseResponse(resp)
	var auth, dl []byte
	busy, err := p.post(resp, body, f.cfg.Now(), limit, limit, &auth, &dl)
	if err == nil {
		err = DecodeLeaseReply(results, resp.Body())
	}
	if err != nil {
		if busy {
			return fmt.Errorf("%w: %w: %s: %v", ErrPeerUnavailable, ErrPeerBusy, addr, err)
		}
		return fmt.Errorf("%w: %s: %v", ErrPeerUnavailable, addr, err)
	}
	return nil
}

// checkLeaseOp reports whether op can be encoded, naming the field.
func checkLeaseOp(op *engine.LeaseOp) error {
	switch {
	case op.Kind < engine.LeaseLend || op.Kind > engine.LeasePeek:
		return fmt.Errorf("kind: unknown kind %d", op.Kind)
	case op.Rule == "" || len(op.Rule) > MaxRuleLen:
		return fmt.Errorf("rule: must be 1..%d bytes", MaxRuleLen)
	case op.Key == "" || len(op.Key) > MaxKeyLen:
		return fmt.Errorf("key: must be 1..%d bytes", MaxKeyLen)
	case len(op.Holder) > lease.MaxHolderLen:
		return fmt.Errorf("holder: longer than %d bytes", lease.MaxHolderLen)
	case len(op.Region) > MaxRuleLen:
		return fmt.Errorf("region: longer than %d bytes", MaxRuleLen)
	}
	for _, v := range [...]int64{op.Want, op.Need, op.Tokens, op.Demand, op.To.Held, op.To.SpentBefore,
		op.To.AheadWindows, op.To.AheadTokens} {
		if v < 0 || v > MaxHits {
			return fmt.Errorf("counts: must be between 0 and %d", int64(MaxHits))
		}
	}
	if op.To.TTL < 0 || op.To.Idle < 0 {
		return errors.New("durations: must be ≥ 0")
	}
	return nil
}

// AppendLeaseBatch appends the body of a lease batch holding ops, or
// returns an error naming the op and field.
func AppendLeaseBatch(dst []byte, ops []engine.LeaseOp) ([]byte, error) {
	if len(ops) > MaxLeaseOps {
		return dst, fmt.Errorf("ops: more than %d", MaxLeaseOps)
	}
	dst = append(dst, LeaseVersion)
	dst = binary.AppendUvarint(dst, uint64(len(ops)))
	for i := range ops {
		op := &ops[i]
		if err := checkLeaseOp(op); err != nil {
			return dst[:0], fmt.Errorf("op %d: %w", i, err)
		}
		dst = append(dst, byte(op.Kind))
		dst = appendString(dst, op.Rule)
		dst = appendString(dst, op.Key)
		dst = appendString(dst, op.Holder)
		dst = appendString(dst, op.Region)
		var flags byte
		if op.To.First {
			flags |= 1
		}
		dst = append(dst, flags)
		for _, v := range [...]uint64{uint64(op.Want), uint64(op.Need), uint64(op.Tokens), uint64(op.Demand),
			uint64(op.To.Held), uint64(ceilMS(op.To.TTL)), uint64(op.To.SpentBefore), uint64(op.To.Idle / time.Millisecond),
			uint64(op.To.Call), uint64(op.To.Unanswered), uint64(op.To.AheadWindows), uint64(op.To.AheadTokens)} {
			dst = binary.AppendUvarint(dst, v)
		}
	}
	return dst, nil
}

// DecodeLeaseBatch decodes a lease batch body into dst[:0]; the ops'
// strings are views of body. Errors wrap ErrMalformed and name the op
// and field.
func DecodeLeaseBatch(dst []engine.LeaseOp, body []byte) ([]engine.LeaseOp, error) {
	dst = dst[:0]
	d := decoder{b: body}
	v, ok := d.byte()
	if !ok || v != LeaseVersion {
		return dst, malformed("version: want %d", LeaseVersion)
	}
	n, err := d.uvarint()
	if err != nil {
		return dst, malformed("count: %v", err)
	}
	if n > MaxLeaseOps {
		return dst, malformed("ops: more than %d", MaxLeaseOps)
	}
	if n > uint64(len(d.b))/20 { // an op takes at least 20 bytes
		return dst, malformed("ops: %d ops in %d bytes", n, len(d.b))
	}
	dst = grow(dst, int(n))
	for i := range dst {
		if err := d.leaseOp(&dst[i]); err != nil {
			return dst[:0], malformed("op %d: %v", i, err)
		}
	}
	if len(d.b) != 0 {
		return dst[:0], malformed("body: %d bytes after the last op", len(d.b))
	}
	return dst, nil
}

func (d *decoder) leaseOp(op *engine.LeaseOp) error {
	*op = engine.LeaseOp{}
	k, ok := d.byte()
	if !ok || k < byte(engine.LeaseLend) || k > byte(engine.LeasePeek) {
		return errors.New("kind: unknown or truncated")
	}
	op.Kind = engine.LeaseKind(k)
	strs := [...]struct {
		name     string
		dst      *string
		min, max int
	}{{"rule", &op.Rule, 1, MaxRuleLen}, {"key", &op.Key, 1, MaxKeyLen},
		{"holder", &op.Holder, 0, lease.MaxHolderLen}, {"region", &op.Region, 0, MaxRuleLen}}
	for _, s := range strs {
		b, err := d.bytes(s.min, s.max)
		if err != nil {
			return fmt.Errorf("%s: %w", s.name, err)
		}
		*s.dst = str(b, true)
	}
	flags, ok := d.byte()
	if !ok || flags&^1 != 0 {
		return errors.New("flags: unknown or truncated")
	}
	op.To.First = flags&1 != 0
	var v [12]int64
	for j := range v {
		x, err := d.uvarint()
		if err != nil {
			return fmt.Errorf("field %d: %w", j, err)
		}
		if x > MaxHits {
			return fmt.Errorf("field %d: must be between 0 and %d", j, int64(MaxHits))
		}
		v[j] = int64(x)
	}
	op.Want, op.Need, op.Tokens, op.Demand, op.To.Held = v[0], v[1], v[2], v[3], v[4]
	op.To.TTL = time.Duration(v[5]) * time.Millisecond
	op.To.SpentBefore = v[6]
	op.To.Idle = time.Duration(v[7]) * time.Millisecond
	if v[8] > 1<<32-1 || v[9] > 1<<32-1 {
		return errors.New("call: out of range")
	}
	op.To.Call, op.To.Unanswered = uint32(v[8]), uint32(v[9])
	op.To.AheadWindows, op.To.AheadTokens = v[10], v[11]
	if op.Need > op.Want {
		return errors.New("need: more than want")
	}
	return nil
}

// AppendLeaseReply appends the body of a reply holding results, in the
// order of the batch's ops. Error messages longer than MaxErrorLen are
// truncated.
func AppendLeaseReply(dst []byte, results []engine.LeaseResult) []byte {
	dst = append(dst, LeaseVersion)
	dst = binary.AppendUvarint(dst, uint64(len(results)))
	for i := range results {
		r := &results[i]
		if r.Err != "" {
			dst = append(dst, leaseFlagError, 0, 0, 0, 0, 0, 0, 0)
			msg := r.Err
			if len(msg) > MaxErrorLen {
				msg = msg[:MaxErrorLen]
			}
			dst = appendString(dst, msg)
			continue
		}
		var flags byte
		if r.Checked {
			flags |= leaseFlagChecked
		}
		if r.Crowded {
			flags |= leaseFlagCrowded
		}
		g := &r.Grant
		dst = append(dst, flags)
		for _, v := range [...]int64{g.Granted, g.Remaining, ceilMS(g.Wait), ceilMS(g.Reset), g.Lent, g.AheadTokens, g.AheadWindows} {
			dst = binary.AppendUvarint(dst, uint64(max(v, 0)))
		}
	}
	return dst
}

// DecodeLeaseReply decodes a lease reply of len(results) results into
// results. Errors wrap ErrMalformed.
func DecodeLeaseReply(results []engine.LeaseResult, body []byte) error {
	d := decoder{b: body}
	v, ok := d.byte()
	if !ok || v != LeaseVersion {
		return malformed("version: want %d", LeaseVersion)
	}
	n, err := d.uvarint()
	if err != nil || n != uint64(len(results)) {
		return malformed("count: %d results for %d ops", n, len(results))
	}
	for i := range results {
		r := &results[i]
		*r = engine.LeaseResult{}
		flags, ok := d.byte()
		if !ok || flags&^leaseFlagsKnown != 0 {
			return malformed("result %d: flags: unknown or truncated", i)
		}
		var f [7]int64
		for j := range f {
			x, err := d.uvarint()
			if err != nil {
				return malformed("result %d: field %d: %v", i, j, err)
			}
			if x > MaxHits {
				return malformed("result %d: field %d: more than %d", i, j, int64(MaxHits))
			}
			f[j] = int64(x)
		}
		if flags&leaseFlagError != 0 {
			msg, err := d.bytes(1, MaxErrorLen)
			if err != nil {
				return malformed("result %d: error: %v", i, err)
			}
			r.Err = string(msg)
			continue
		}
		r.Checked, r.Crowded = flags&leaseFlagChecked != 0, flags&leaseFlagCrowded != 0
		r.Grant = lease.Grant{Granted: f[0], Remaining: f[1], Wait: time.Duration(f[2]) * time.Millisecond,
			Reset: time.Duration(f[3]) * time.Millisecond, Lent: f[4], AheadTokens: f[5], AheadWindows: f[6], Crowded: r.Crowded,
			Checked: r.Checked}
	}
	if len(d.b) != 0 {
		return malformed("body: %d bytes after the last result", len(d.b))
	}
	return nil
}

// serveLeases answers a lease batch (the request's signature checked).
func serveLeases(ctx *fasthttp.RequestCtx, d Decider, body []byte, sig *signer, nonce *[NonceLen]byte, met *handlerMetrics) {
	ld, ok := d.(LeaseDecider)
	if !ok {
		ctx.Error("forward: this node applies no lease ops", fasthttp.StatusBadRequest)
		met.rejected[rejectMalformed].Inc()
		return
	}
	ops, err := DecodeLeaseBatch(nil, body)
	if err != nil {
		ctx.Error(err.Error(), fasthttp.StatusBadRequest)
		met.rejected[rejectMalformed].Inc()
		return
	}
	results := make([]engine.LeaseResult, len(ops))
	for i := range ops {
		if !validLeaseOp(&ops[i]) {
			results[i].Err = "rule, key, holder or region: not valid"
		}
	}
	sub := make([]engine.LeaseOp, 0, len(ops))
	idx := make([]int, 0, len(ops))
	for i := range ops {
		if results[i].Err == "" {
			sub = append(sub, ops[i])
			idx = append(idx, i)
		}
	}
	subRes := make([]engine.LeaseResult, len(sub))
	ld.DecideLeases(sub, subRes)
	for j, i := range idx {
		results[i] = subRes[j]
	}
	out := AppendLeaseReply(nil, results)
	met.served.Add(len(results))
	ctx.SetContentType(ContentType)
	if sig != nil {
		var raw [32]byte
		ctx.Response.Header.SetBytesV(ReplyAuthHeader, hex.AppendEncode(nil, sig.replyMAC(raw[:0], nonce, out)))
	}
	ctx.SetBody(out)
}

// validLeaseOp reports whether op's rule, key, holder and region pass the
// public API's rules (as validItem's), so that the Decider gets none that
// a client could not send.
func validLeaseOp(op *engine.LeaseOp) bool {
	if !api.ValidName(op.Rule) || engine.KeyProblem(op.Key) != "" || engine.TextProblem(op.Holder) != "" {
		return false
	}
	if op.Kind != engine.LeasePeek && op.Holder == "" {
		return false
	}
	return op.Region == "" || api.ValidName(op.Region)
}
