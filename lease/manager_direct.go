package lease

import (
	"context"
	"errors"
	"time"

	"github.com/sluicehq/sluice/lease/logkey"
)

// refunder is a Store that takes back hits its Lease calls without a
// Lessee ID granted (MemoryStore.Refund): Config.Direct's Refund.
type refunder interface {
	Refund(ctx context.Context, key string, p Policy, hits int64) error
}

// takeDirect is Take with Config.Direct: one Store call spends hits at
// once (need = want = hits, no Lessee ID) or denies them, and its answer
// is the decision. A peek (hits 0) changes nothing.
func (m *Manager) takeDirect(key string, p Policy, hits int64) (Decision, error) {
	m.st.storeDecisions.Add(1)
	m.met.decisionsStore.Inc()
	g, err := m.direct.Lease(m.ctx, key, p, hits, hits, Lessee{})
	if err != nil {
		if fe := (*FieldError)(nil); errors.As(err, &fe) {
			return Decision{}, fe // as a leasing Manager's Take says it
		}
		if callerError(err) {
			return Decision{}, err
		}
		return m.failure(nil, key, p, hits, err), nil
	}
	if hits == 0 || g.Granted >= hits {
		return Decision{Allowed: true, Limit: p.Limit, Remaining: g.Remaining, Reset: g.Reset}, nil
	}
	return Decision{Limit: p.Limit, Remaining: g.Remaining, Reset: g.Reset, RetryAfter: max(g.Wait, time.Millisecond)}, nil
}

// refundDirect is Refund with Config.Direct: the Store takes the hits
// back, if it can (see refunder).
func (m *Manager) refundDirect(key string, p Policy, hits int64) {
	if m.refunder == nil {
		return
	}
	if err := m.refunder.Refund(m.ctx, key, p, hits); err != nil {
		m.cfg.Logger.Debug("cannot refund", logkey.Attr(key), "hits", hits, "err", err)
	}
}
