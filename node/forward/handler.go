package forward

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"sync"

	"github.com/valyala/fasthttp"

	"github.com/sluicehq/sluice/shard"
)

// AuthHeader carries the cluster token of internal requests.
const AuthHeader = "X-Sluice-Auth"

// authMessage is what the cluster key signs to make the token.
const authMessage = "sluice-internal-v1"

// authToken returns hex(HMAC-SHA256(key, authMessage)), or nil without a
// key.
func authToken(key []byte) []byte {
	if len(key) == 0 {
		return nil
	}
	m := hmac.New(sha256.New, key)
	m.Write([]byte(authMessage))
	return hex.AppendEncode(nil, m.Sum(nil))
}

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
	// ClusterKey, when not empty, is the cluster's shared key: requests
	// must carry its token in X-Sluice-Auth or are answered 401. Empty
	// leaves the endpoint open (the node warns at start).
	ClusterKey []byte
	// MaxItems bounds the items of one batch. Zero means MaxItems (4096).
	MaxItems int
}

// handlerState is the per-request scratch space, pooled.
type handlerState struct {
	items   []Item
	results []Result
	out     []byte
}

// NewHandler returns the handler of POST /internal/v1/batch: it checks the
// cluster token, decodes the batch, has d decide it and writes the reply.
// It answers 405 to other methods, 401 to a wrong or missing token, 413 to
// a body over MaxBodyBytes or MaxItems, and 400 with a message naming the
// item and field to a malformed body. It does not look at the path: mount
// it at [Path].
func NewHandler(cfg HandlerConfig, d Decider) fasthttp.RequestHandler {
	token := authToken(cfg.ClusterKey)
	maxItems := cfg.MaxItems
	if maxItems <= 0 || maxItems > MaxItems {
		maxItems = MaxItems
	}
	pool := sync.Pool{New: func() any { return new(handlerState) }}
	return func(ctx *fasthttp.RequestCtx) {
		if !ctx.IsPost() {
			ctx.Response.Header.Set("Allow", "POST")
			ctx.Error("forward: method not allowed, want POST", fasthttp.StatusMethodNotAllowed)
			rejected(rejectMethod)
			return
		}
		if token != nil && subtle.ConstantTimeCompare(ctx.Request.Header.Peek(AuthHeader), token) != 1 {
			ctx.Error("forward: missing or wrong "+AuthHeader, fasthttp.StatusUnauthorized)
			rejected(rejectAuth)
			return
		}
		body := ctx.PostBody()
		if len(body) > MaxBodyBytes {
			ctx.Error("forward: body: larger than 4 MiB", fasthttp.StatusRequestEntityTooLarge)
			rejected(rejectTooLarge)
			return
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
		ctx.SetBody(st.out)
	}
}
