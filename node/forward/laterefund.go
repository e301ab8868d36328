package forward

import "time"

// lateWait is how long a request keeps waiting for a reply after its
// callers had the timeout, to refund what a late reply allowed.
const lateWait = time.Second

// refundLate sends the owner refunds of the checks of b that it allowed
// (b.results) after b's callers were failed: they shed those checks, so
// the hits the owner charged go back. A refund that fails is lost (errs
// towards admitting less).
func (p *peer) refundLate(b *batch) {
	items, err := decodeBatch(nil, b.body, false)
	if err != nil || len(items) != len(b.results) {
		return
	}
	var refunds []Item
	for i := range items {
		it, r := &items[i], &b.results[i]
		if it.Op == OpCheck && it.Hits > 0 && r.Allowed && !r.Degraded && r.Error == "" {
			refunds = append(refunds, Item{Op: OpRefund, Rule: it.Rule, Key: it.Key, Hits: it.Hits})
		}
	}
	if len(refunds) == 0 {
		return
	}
	body, err := AppendBatch(nil, refunds)
	if err != nil {
		return
	}
	saved := b.results
	b.results = nil // do decodes into it: keep the batch's
	now := p.f.cfg.Now()
	if _, _, _, err := p.do(b, body, len(refunds), now, p.f.cfg.MaxTimeout, p.f.cfg.MaxTimeout); err == nil {
		p.f.lateRefunds.Add(len(refunds))
	}
	b.results = saved
}
