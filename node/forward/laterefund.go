package forward

import "time"

// lateWait is how long a request keeps waiting for a reply after its
// callers had the timeout, to refund what a late reply allowed.
const lateWait = time.Second

// refundLate sends the owner refunds of the checks of b that it allowed
// (b.results) after b's callers were failed: they decided those checks
// themselves, so the hits the owner charged go back. A refund that fails
// is lost (errs towards admitting less).
func (p *peer) refundLate(b *batch) { p.refundItems(b, b.body, b.results) }

// waiterBody is w's items as a batch body.
func waiterBody(w *waiter) []byte {
	return append(AppendBatchHeader(nil, w.n), w.enc...)
}

// refundUnread has the owner refund what it allowed of w's checks, whose
// results were delivered but that its caller decides itself (it gave up
// on the call: see waiter.abandon), from a goroutine of the peer's. wait:
// w's done is still to be received.
func (p *peer) refundUnread(w *waiter, wait bool) {
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		if wait {
			<-w.done // delivered: done follows at once
		}
		b := p.f.batches.Get().(*batch)
		p.refundItems(b, waiterBody(w), w.res[:w.n])
		p.putBatch(b)
	}()
}

// refundItems sends the owner refunds of the checks of body (a batch)
// that it allowed (results), with b's buffers.
func (p *peer) refundItems(b *batch, body []byte, results []Result) {
	items, err := decodeBatch(nil, body, false)
	if err != nil || len(items) != len(results) {
		return
	}
	var refunds []Item
	for i := range items {
		it, r := &items[i], &results[i]
		if it.Op == OpCheck && it.Hits > 0 && r.Allowed && !r.Degraded && r.Error == "" {
			refunds = append(refunds, Item{Op: OpRefund, Rule: it.Rule, Key: it.Key, Hits: it.Hits})
		}
	}
	if len(refunds) == 0 {
		return
	}
	rbody, err := AppendBatch(nil, refunds)
	if err != nil {
		return
	}
	saved := b.results
	b.results = nil // do decodes into it: keep the batch's
	now := p.f.cfg.Now()
	if _, _, _, err := p.do(b, rbody, len(refunds), now, p.f.cfg.MaxTimeout, p.f.cfg.MaxTimeout); err == nil {
		p.f.lateRefunds.Add(len(refunds))
	}
	b.results = saved
}
