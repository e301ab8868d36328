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

	"github.com/valyala/fasthttp"

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
	// Now is the clock. Nil means time.Now.
	Now func() time.Time
	// Logger receives the (rate-limited) clock-skew warnings. Nil means
	// slog.Default().
	Logger *slog.Logger
}

// skewLogEvery rate-limits the clock-skew warning.
const skewLogEvery = 10 * time.Second

// handlerState is the per-request scratch space, pooled.
type handlerState struct {
	items   []Item
	results []Result
	out     []byte
	raw     [sha256.Size]byte // the reply's MAC
	mac     []byte            // hex of raw
}

// NewHandler returns the handler of POST /internal/v1/batch: it checks the
// request's signature, decodes the batch, has d decide it and writes the
// reply (signed too). It answers 405 to other methods, 401 to a missing,
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
	nonces := newNonceCache(window, maxNonces)
	var lastSkewLog atomic.Int64 // Unix nanoseconds of the last warning
	pool := sync.Pool{New: func() any { return new(handlerState) }}
	return func(ctx *fasthttp.RequestCtx) {
		if !ctx.IsPost() {
			ctx.Response.Header.Set("Allow", "POST")
			ctx.Error("forward: method not allowed, want POST", fasthttp.StatusMethodNotAllowed)
			rejected(rejectMethod)
			return
		}
		body := ctx.PostBody()
		if len(body) > MaxBodyBytes {
			ctx.Error("forward: body: larger than 4 MiB", fasthttp.StatusRequestEntityTooLarge)
			rejected(rejectTooLarge)
			return
		}
		var auth parsedAuth
		if sig != nil {
			t := now()
			var skew time.Duration
			var err error
			auth, skew, err = sig.verify(ctx.Request.Header.Peek(AuthHeader), b2s(ctx.Method()), b2s(ctx.Path()), body, t, window)
			if err == nil {
				err = nonces.add(&auth.nonce, t)
			}
			if err != nil {
				switch {
				case errors.Is(err, errStale):
					rejected(rejectStale)
					if last := lastSkewLog.Load(); t.UnixNano()-last >= int64(skewLogEvery) && lastSkewLog.CompareAndSwap(last, t.UnixNano()) {
						log.Warn("internal request refused: its timestamp is outside the acceptance window; "+
							"are the nodes' clocks synchronised (NTP)? (logged at most every 10s)",
							"peer", ctx.RemoteAddr().String(), "skew", skew.Round(time.Millisecond).String(), "window", window.String())
					}
				case errors.Is(err, errReplay):
					rejected(rejectReplay)
				case errors.Is(err, errNonceCacheFull):
					rejected(rejectNonceCacheFull)
					ctx.Error("forward: "+err.Error(), fasthttp.StatusServiceUnavailable)
					return
				default:
					rejected(rejectAuth)
				}
				ctx.Error("forward: "+err.Error(), fasthttp.StatusUnauthorized)
				return
			}
		}
		st := pool.Get().(*handlerState)
		defer pool.Put(st)
		var err error
		st.items, err = decodeBatch(st.items, body, true)
		if err != nil {
			ctx.Error(err.Error(), fasthttp.StatusBadRequest)
			rejected(rejectMalformed)
			return
		}
		if len(st.items) > maxItems {
			ctx.Error("forward: items: too many in one batch", fasthttp.StatusRequestEntityTooLarge)
			rejected(rejectTooLarge)
			clear(st.items)
			return
		}
		st.results = grow(st.results, len(st.items))
		clear(st.results)
		plans := d.DecideBatch(st.items, st.results)
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
		servedItems.Add(len(st.results))
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
