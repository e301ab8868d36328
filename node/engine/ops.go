package engine

import (
	"strconv"

	"github.com/sluicehq/sluice/lease"
)

// Acquire takes a slot of the concurrency rule named rule for key (hits
// 1), or peeks (hits 0), with t's rules (nil: ErrNotReady): b gets one
// request of one item, decided and combined as Decide would (a shadow
// rule's denial is allowed), counted in sluice_checks_total. slot is the
// id to release the slot with, "" when none was taken. Slots are not
// routed: the Manager takes them in the Store every node shares. An
// unknown rule or one that is not a concurrency rule is an error naming
// the field "rule"; an error of the Manager is returned as is. b must be
// empty.
func (e *Engine) Acquire(t *Table, b *Batch, rule, key string, hits int64) (slot string, err error) {
	if t == nil {
		return "", ErrNotReady
	}
	ri := t.Get(rule)
	switch {
	case ri == nil:
		return "", fieldError("rule", "unknown rule "+strconv.Quote(rule))
	case !ri.base.Algorithm.Acquired():
		return "", fieldError("rule", "rule "+strconv.Quote(rule)+" is a "+ri.base.Algorithm.String()+" rule, which takes no slots: use /v1/check")
	}
	if msg := KeyProblem(key); msg != "" {
		return "", fieldError("key", msg)
	}
	b.Add(rule, key, hits)
	qi := b.End()
	it := &b.Items[0]
	it.ri, it.Policy = ri, ri.rule.PolicyFor(key)
	it.ckey = b.counterKey(ri.prefix, key)
	it.Decision, slot, err = e.mgr.Acquire(it.ckey, it.Policy, hits)
	if err != nil {
		return "", err
	}
	b.record(it)
	b.combine(&b.Requests[qi])
	return slot, nil
}

// Release frees the slot of the concurrency rule named rule for key taken
// by Acquire, and peeks: the decision says what is free now, under the
// policy p of the rule for key. An unknown rule (the slot expires at its
// TTL) or one that is not a concurrency rule is an error naming the field
// "lease_id". b is a scratch batch (its key buffer).
func (e *Engine) Release(t *Table, b *Batch, rule, key, slot string) (d lease.Decision, p lease.Policy, err error) {
	if t == nil {
		return d, p, ErrNotReady
	}
	ri := t.Get(rule)
	switch {
	case ri == nil:
		return d, p, fieldError("lease_id", "rule "+strconv.Quote(rule)+" no longer exists (the slot expires at its TTL)")
	case !ri.base.Algorithm.Acquired():
		return d, p, fieldError("lease_id", "rule "+strconv.Quote(rule)+" is a "+ri.base.Algorithm.String()+" rule, which takes no slots")
	}
	p = ri.rule.PolicyFor(key)
	ckey := b.counterKey(ri.prefix, key)
	if err := e.mgr.Release(ckey, p, slot); err != nil {
		return d, p, err
	}
	d, _, _ = e.mgr.Acquire(ckey, p, 0) // peek: what is free now
	return d, p, nil
}
