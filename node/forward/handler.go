package forward

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/VictoriaMetrics/metrics"
	"github.com/valyala/fasthttp"

	"github.com/sluicehq/sluice/node/api"
	"github.com/sluicehq/sluice/node/engine"
	"github.com/sluicehq/sluice/shard"
)

// Decider decides the items a peer forwarded. The node implements it with
// its lease.Manager.
type Decider interface {
	// DecideBatch fills results[i] with the answer to items[i] (len(results)
	// == len(items); results are zero on entry) and returns the split
	// plans the senders should know, which may be nil. It is called
	// concurrently. items, results and the items' strings are only valid
	// during the call: the strings are views of the request body, so a
	// Decider that keeps a key or rule name must copy it (strings.Clone;
	// lease.Manager and shard.TopK already copy what they keep).
	DecideBatch(items []Item, results []Result) (plans []shard.Plan)
}

// HandlerConfig configures [NewHandler].
type HandlerConfig struct {
	// ClusterKey, when not empty, is the cluster's shared key: every
	// request must be signed with it (see the package doc) or is answered
	// 401. Empty leaves the endpoint open (node refuses that unless its
	// cluster is explicitly insecure).
	ClusterKey []byte
	// Window is how far a request's timestamp may be from this node's
	// clock, either way. Zero means DefaultWindow (30s).
	Window time.Duration
	// MaxNonces bounds the remembered nonces per 2 × Window; requests
	// beyond it are answered 503. Zero means DefaultMaxNonces.
	MaxNonces int
	// MaxItems bounds the items of one batch. Zero means MaxItems (4096).
	MaxItems int
	// RefundWindow is how long this node remembers what it lent a peer
	// for an allowed check (see DefaultRefundWindow): a refund from that
	// peer gives back at most what it was lent for that rule and key in
	// the last one to two windows. Zero means DefaultRefundWindow (10s).
	RefundWindow time.Duration
	// MaxLoans bounds the remembered loans per RefundWindow. Zero means
	// DefaultMaxLoans.
	MaxLoans int
	// Now is the clock. Nil means time.Now.
	Now func() time.Time
	// Logger receives the (rate-limited) clock-skew warnings. Nil means
	// slog.Default().
	Logger *slog.Logger
	// Metrics is the set the handler's sluice_forward_* counters are
	// registered in. Nil means the process's default set (see
	// Config.Metrics); a node gives its Forwarder and its handler the same
	// set.
	Metrics *metrics.Set
}

// skewLogEvery rate-limits the clock-skew warning.
const skewLogEvery = 10 * time.Second

// handlerState is the per-request scratch space, pooled.
type handlerState struct {
	items   []Item
	results []Result
	// sub and subRes are the items passed to the Decider when some are
	// answered without it (invalid, or refunds beyond what was lent), and
	// idx their indexes in items.
	sub    []Item
	subRes []Result
	idx    []int
	out    []byte
	raw    [sha256.Size]byte // the reply's MAC
	mac    []byte            // hex of raw
}

// NewHandler returns the handler of POST /internal/v1/batch: it checks the
// request's signature, decodes the batch, has d decide it and writes the
// reply (signed too). Items whose rule or key the public API would refuse
// (see [validItem]) and refunds beyond what this node lent the sender for
// that rule and key are answered with an error without reaching d (a
// refund partly covered is cut down to what was lent). It answers 405 to other methods, 401 to a missing,
// wrong, stale or replayed signature, 503 when the nonce cache is full,
// 413 to a body over MaxBodyBytes or MaxItems, and 400 with a message
// naming the item and field to a malformed body. It does not look at the
// path (the signature covers the one the sender used): mount it at
// [Path].
func NewHandler(cfg HandlerConfig, d Decider) fasthttp.RequestHandler {
	sig := newSigner(cfg.ClusterKey)
	maxItems := cfg.MaxItems
	if maxItems <= 0 || maxItems > MaxItems {
		maxItems = MaxItems
	}
	window := cfg.Window
	if window <= 0 {
		window = DefaultWindow
	}
	maxNonces := cfg.MaxNonces
	if maxNonces <= 0 {
		maxNonces = DefaultMaxNonces
	}
	now := cfg.Now
	if now == nil {
		now = time.Now
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	set := cfg.Metrics
	if set == nil {
		set = metrics.GetDefaultSet()
	}
	met := newHandlerMetrics(set)
	nonces := newNonceCache(window, maxNonces)
	refundWindow := cfg.RefundWindow
	if refundWindow <= 0 {
		refundWindow = DefaultRefundWindow
	}
	maxLoans := cfg.MaxLoans
	if maxLoans <= 0 {
		maxLoans = DefaultMaxLoans
	}
	lent := newLoans(refundWindow, maxLoans)
	late := newLateness()
	var lastSkewLog atomic.Int64 // Unix nanoseconds of the last warning
	pool := sync.Pool{New: func() any { return new(handlerState) }}
	return func(ctx *fasthttp.RequestCtx) {
		if !ctx.IsPost() {
			ctx.Response.Header.Set("Allow", "POST")
			ctx.Error("forward: method not allowed, want POST", fasthttp.StatusMethodNotAllowed)
			met.rejected[rejectMethod].Inc()
			return
		}
		body := ctx.PostBody()
		if len(body) > MaxBodyBytes {
			ctx.Error("forward: body: larger than 4 MiB", fasthttp.StatusRequestEntityTooLarge)
			met.rejected[rejectTooLarge].Inc()
			return
		}
		var auth parsedAuth
		deadline := ctx.Request.Header.Peek(DeadlineHeader)
		if sig != nil {
			t := now()
			var skew time.Duration
			var err error
			auth, skew, err = sig.verify(ctx.Request.Header.Peek(AuthHeader), b2s(ctx.Method()), b2s(ctx.Path()),
				b2s(ctx.Request.Header.Peek(FromHeader)), body, t, window)
			if err == nil {
				var trusted bool
				trusted, err = sig.verifyDeadline(ctx.Request.Header.Peek(DeadlineAuthHeader), &auth.nonce, deadline)
				if !trusted {
					deadline = nil // unsigned (an older sender): not used
				}
			}
			if err == nil {
				err = nonces.add(&auth.nonce, t)
			}
			if err != nil {
				switch {
				case errors.Is(err, errStale):
					met.rejected[rejectStale].Inc()
					if last := lastSkewLog.Load(); t.UnixNano()-last >= int64(skewLogEvery) && lastSkewLog.CompareAndSwap(last, t.UnixNano()) {
						log.Warn("internal request refused: its timestamp is outside the acceptance window; "+
							"are the nodes' clocks synchronised (NTP)? (logged at most every 10s)",
							"peer", ctx.RemoteAddr().String(), "skew", skew.Round(time.Millisecond).String(), "window", window.String())
					}
				case errors.Is(err, errReplay):
					met.rejected[rejectReplay].Inc()
				case errors.Is(err, errNonceCacheFull):
					met.rejected[rejectNonceCacheFull].Inc()
					ctx.Error("forward: "+err.Error(), fasthttp.StatusServiceUnavailable)
					return
				default:
					met.rejected[rejectAuth].Inc()
				}
				ctx.Error("forward: "+err.Error(), fasthttp.StatusUnauthorized)
				return
			}
		}
		if len(body) > 0 && body[0] == LeaseVersion {
			serveLeases(ctx, d, body, sig, &auth.nonce, met)
			return
		}
		st := pool.Get().(*handlerState)
		defer pool.Put(st)
		var err error
		st.items, err = decodeBatch(st.items, body, true)
		if err != nil {
			ctx.Error(err.Error(), fasthttp.StatusBadRequest)
			met.rejected[rejectMalformed].Inc()
			return
		}
		if len(st.items) > maxItems {
			ctx.Error("forward: items: too many in one batch", fasthttp.StatusRequestEntityTooLarge)
			met.rejected[rejectTooLarge].Inc()
			clear(st.items)
			return
		}
		peer := b2s(ctx.Request.Header.Peek(FromHeader))
		if peer == "" || len(peer) > MaxMemberLen {
			peer = string(ctx.RemoteIP().To16()) // unsigned: account by address
		}
		t := now()
		var lag, budget time.Duration
		hasDeadline := false
		if len(deadline) > 0 {
			if lag, budget, hasDeadline = late.check(peer, deadline, t); hasDeadline && lag > budget {
				// The sender has given up on this batch: deciding it
				// would spend tokens for answers nobody reads.
				clear(st.items)
				met.rejected[rejectLate].Inc()
				ctx.Error("forward: late: queued "+lag.Round(time.Millisecond).String()+
					" past the sender's timeout of "+budget.String()+"; not decided", fasthttp.StatusServiceUnavailable)
				return
			}
		}
		st.results = grow(st.results, len(st.items))
		clear(st.results)
		// decidedLate: the decisions end after the sender's timeout (a
		// batch of cold keys waiting on the Store, a starved CPU): the
		// sender sheds the batch's checks, so what they charged is
		// refunded instead of spent for nothing.
		decidedLate := func() bool { return hasDeadline && lag+now().Sub(t) > budget }
		plans, undone := st.decide(d, met, lent, peer, t, decidedLate)
		if undone {
			clear(st.items)
			met.rejected[rejectLate].Inc()
			ctx.Error("forward: late: decided after the sender's timeout of "+budget.String()+"; refunded", fasthttp.StatusServiceUnavailable)
			return
		}
		st.out, err = AppendReply(st.out[:0], st.results, plans)
		if err != nil {
			// The plans are out of bounds: answer the items anyway.
			st.out, err = AppendReply(st.out[:0], st.results, nil)
		}
		clear(st.items) // drop the views of body
		if err != nil {
			ctx.Error("forward: cannot encode reply: "+err.Error(), fasthttp.StatusInternalServerError)
			return
		}
		met.served.Add(len(st.results))
		ctx.SetContentType(ContentType)
		if sig != nil {
			st.mac = hex.AppendEncode(st.mac[:0], sig.replyMAC(st.raw[:0], &auth.nonce, st.out))
			ctx.Response.Header.SetBytesV(ReplyAuthHeader, st.mac)
		}
		ctx.SetBody(st.out)
	}
}

// b2s views b as a string (valid while b is).
func b2s(b []byte) string { return unsafe.String(unsafe.SliceData(b), len(b)) }

// errRefundOverLent answers a refund of hits this node did not lend the
// sender (for that rule and key, in the last RefundWindow).
const errRefundOverLent = "refund: more than this node lent to the peer for this rule and key"

// validItem says what is wrong with an item's rule or key by the public
// API's rules (api.ValidName, and the engine's one key validation,
// engine.KeyProblem: no control characters such as newlines or NUL,
// valid UTF-8), or "" when it is valid. The wire format
// bounds lengths already.
func validItem(it *Item) string {
	switch {
	case !api.ValidName(it.Rule):
		return "rule: may hold only A-Z a-z 0-9 _ . -"
	case engine.KeyProblem(it.Key) != "":
		return "key: " + engine.KeyProblem(it.Key)
	}
	return ""
}

// decide answers st.items: it validates them and bounds refunds by what
// lent remembers for peer, has d decide the rest, and records what the
// allowed checks charged as lent to peer. If late reports true once they
// are decided, it refunds what the allowed checks charged instead (d
// decides OpRefund items for them) and reports undone.
func (st *handlerState) decide(d Decider, met *handlerMetrics, lent *loans, peer string, now time.Time, late func() bool) (plans []shard.Plan, undone bool) {
	items, results := st.items, st.results
	skip := 0
	lent.mu.Lock()
	for i := range items {
		it, res := &items[i], &results[i]
		if msg := validItem(it); msg != "" {
			res.Error = msg
			skip++
			met.refused[refuseInvalid].Inc()
			continue
		}
		if it.Op != OpRefund || it.Hits == 0 {
			continue
		}
		got := lent.take(loanKey{peer, it.Rule, it.Key}, it.Hits, now)
		if got < it.Hits {
			met.refused[refuseRefund].Inc()
			met.refusedHits.Add(int(it.Hits - got))
		}
		if got == 0 {
			res.Error = errRefundOverLent
			skip++
			continue
		}
		it.Hits = got
	}
	lent.mu.Unlock()

	if skip == 0 {
		plans = d.DecideBatch(items, results)
	} else if skip < len(items) {
		st.sub, st.subRes, st.idx = st.sub[:0], grow(st.subRes, len(items)-skip), st.idx[:0]
		for i := range items {
			if results[i].Error == "" {
				st.sub = append(st.sub, items[i])
				st.idx = append(st.idx, i)
			}
		}
		clear(st.subRes)
		plans = d.DecideBatch(st.sub, st.subRes)
		for j, i := range st.idx {
			results[i] = st.subRes[j]
		}
		clear(st.sub)
		clear(st.subRes)
	}

	if late() {
		st.sub, st.subRes = st.sub[:0], st.subRes[:0]
		for i := range items {
			if it, res := &items[i], &results[i]; charged(it, res) {
				st.sub = append(st.sub, Item{Op: OpRefund, Rule: it.Rule, Key: it.Key, Hits: it.Hits})
			}
		}
		if len(st.sub) > 0 {
			st.subRes = grow(st.subRes, len(st.sub))
			clear(st.subRes)
			d.DecideBatch(st.sub, st.subRes)
			met.lateRefunds.Add(len(st.sub))
			clear(st.sub)
			clear(st.subRes)
		}
		return nil, true
	}
	lent.mu.Lock()
	for i := range items {
		it, res := &items[i], &results[i]
		if charged(it, res) {
			lent.lend(loanKey{peer, it.Rule, it.Key}, it.Hits, now)
		}
	}
	lent.mu.Unlock()
	return plans, false
}

// charged reports whether the check it, answered res, took hits that its
// sender may refund (engine.Charged).
func charged(it *Item, res *Result) bool {
	if it.Op != OpCheck || res.Error != "" {
		return false
	}
	d := res.Decision()
	return engine.Charged(&d, it.Hits)
}
