package node

import (
	"errors"
	"net"

	"github.com/valyala/fasthttp"

	"github.com/sluicehq/sluice/lease"
	"github.com/sluicehq/sluice/node/api"
	"github.com/sluicehq/sluice/node/engine"
)

// Errors answered by the HTTP API. errorStatus maps them (and the errors of
// node/api and lease) to status codes.
var (
	// ErrNotFound means no endpoint serves the request's path.
	ErrNotFound = errors.New("not found")
	// ErrMethodNotAllowed means the path exists but not for this method.
	ErrMethodNotAllowed = errors.New("method not allowed")
	// ErrBodyTooLarge means the request body exceeds Config.MaxBodyBytes.
	ErrBodyTooLarge = errors.New("request body too large")
	// ErrHeaderTooLarge means the request line and headers exceed
	// Config.MaxHeaderBytes.
	ErrHeaderTooLarge = errors.New("request headers too large")
	// ErrNotReady means no rule set has been loaded yet (the engine's
	// error).
	ErrNotReady = engine.ErrNotReady
)

// fieldError builds the 400 error naming a request field.
func fieldError(field, msg string) error {
	return &api.FieldError{Field: field, Msg: msg}
}

// errorStatus is the one mapping from errors to HTTP status codes, with the
// message and field of the JSON error body.
func errorStatus(err error) (status int, msg, field string) {
	var fe *api.FieldError
	var le *lease.FieldError
	switch {
	case errors.As(err, &fe):
		return fasthttp.StatusBadRequest, fe.Msg, fe.Field
	case errors.As(err, &le):
		return fasthttp.StatusBadRequest, le.Msg, le.Field
	case errors.Is(err, lease.ErrWrongAlgorithm):
		return fasthttp.StatusBadRequest, err.Error(), "rule"
	case errors.Is(err, ErrUnauthorized):
		return fasthttp.StatusUnauthorized, err.Error(), ""
	case errors.Is(err, ErrForbidden):
		return fasthttp.StatusForbidden, err.Error(), ""
	case errors.Is(err, ErrReadOnlyRules):
		return fasthttp.StatusConflict, err.Error(), ""
	case errors.Is(err, ErrStaleVersion):
		return fasthttp.StatusPreconditionFailed, err.Error(), "If-Match"
	case errors.Is(err, lease.ErrNoSlot):
		return fasthttp.StatusNotFound, err.Error(), "lease_id"
	case errors.Is(err, ErrNotFound):
		return fasthttp.StatusNotFound, err.Error(), ""
	case errors.Is(err, ErrMethodNotAllowed):
		return fasthttp.StatusMethodNotAllowed, err.Error(), ""
	case errors.Is(err, ErrBodyTooLarge), errors.Is(err, fasthttp.ErrBodyTooLarge):
		return fasthttp.StatusRequestEntityTooLarge, ErrBodyTooLarge.Error(), ""
	case errors.Is(err, ErrHeaderTooLarge):
		return fasthttp.StatusRequestHeaderFieldsTooLarge, err.Error(), ""
	case errors.Is(err, ErrNotReady), errors.Is(err, lease.ErrStoreUnavailable):
		return fasthttp.StatusServiceUnavailable, err.Error(), ""
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return fasthttp.StatusRequestTimeout, "request timeout", ""
	}
	return fasthttp.StatusInternalServerError, "internal error", ""
}

// writeError answers err as JSON {"error","field"} with its status code.
func (n *Node) writeError(ctx *fasthttp.RequestCtx, err error) {
	status, msg, field := errorStatus(err)
	if status == fasthttp.StatusInternalServerError {
		n.log.Error("internal error", "path", string(ctx.Path()), "err", err)
	}
	ctx.SetStatusCode(status)
	ctx.SetContentTypeBytes(contentTypeJSON)
	if status == fasthttp.StatusServiceUnavailable {
		ctx.Response.Header.SetCanonical(hdrRetryAfter, one)
	}
	ctx.SetBody(api.AppendError(nil, msg, field))
}

// handleTransportError answers the errors fasthttp meets before a handler
// runs: oversize bodies (413) and headers (431), timeouts, bad HTTP.
func (n *Node) handleTransportError(ctx *fasthttp.RequestCtx, err error) {
	if isTLSHandshakeError(err) {
		n.tlsFail.note(err) // no answer: the connection never spoke TLS
		ctx.SetConnectionClose()
		return
	}
	var small *fasthttp.ErrSmallBuffer
	switch {
	case errors.As(err, &small):
		err = ErrHeaderTooLarge
	case errors.Is(err, fasthttp.ErrBodyTooLarge):
		err = ErrBodyTooLarge
	default:
		var ne net.Error
		if !errors.As(err, &ne) {
			err = fieldError("", "cannot parse the HTTP request")
		}
	}
	n.writeError(ctx, err)
	n.met.countHTTP(routeOther, ctx.Response.StatusCode())
}

var (
	contentTypeJSON = []byte("application/json")
	one             = []byte("1")
)
