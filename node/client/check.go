package client

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"
	"unsafe"

	"github.com/valyala/fasthttp"

	"github.com/sluicehq/sluice/node/api"
)

// call holds the reusable buffers of one request.
type call struct {
	req   fasthttp.Request
	resp  fasthttp.Response
	body  []byte
	ckey  []byte
	creq  api.CheckRequest
	batch api.ChecksRequest
	res   []api.CheckResult
	skip  []*node
	// CheckMany's grouping: jobs by node (their idx slices are reused),
	// and the chunks cut from them.
	jobs   []job
	chunks []job
	// A lease request's ops and their answers (leasestore.go).
	lops []api.LeaseOp
	lres []api.LeaseResult
}

func (c *Client) getCall() *call { return c.calls.Get().(*call) }

func (c *Client) putCall(cl *call) {
	cl.req.Reset()
	cl.resp.Reset()
	if cap(cl.body) > 1<<20 {
		cl.body = nil
	}
	clear(cl.skip)
	cl.skip = cl.skip[:0]
	cl.creq = api.CheckRequest{}
	clear(cl.batch.Checks)
	cl.batch.Checks = cl.batch.Checks[:0]
	clear(cl.res)
	cl.res = cl.res[:0]
	for i := range cl.jobs[:cap(cl.jobs)] {
		cl.jobs[:cap(cl.jobs)][i].n = nil
	}
	cl.jobs = cl.jobs[:0]
	clear(cl.chunks[:cap(cl.chunks)])
	cl.chunks = cl.chunks[:0]
	clear(cl.lops)
	cl.lops = cl.lops[:0]
	clear(cl.lres)
	cl.lres = cl.lres[:0]
	c.calls.Put(cl)
}

// ownerOf returns the owner of rule:key in v, or nil (see view.owner).
func (cl *call) ownerOf(v *view, rule, key string) *node {
	if v.ring == nil {
		return nil
	}
	cl.ckey = append(append(append(cl.ckey[:0], rule...), ':'), key...)
	// Ring.Owner only hashes its argument: it may alias the buffer.
	return v.owner(unsafe.String(unsafe.SliceData(cl.ckey), len(cl.ckey)))
}

// send posts cl.body to path on first (nil: any node), falling back to
// other nodes on transport failures, and leaves the answer in cl.resp.
func (c *Client) send(ctx context.Context, v *view, first *node, path string, cl *call) (*node, error) {
	if c.closed() {
		return nil, ErrClosed
	}
	cl.req.Header.SetMethod(fasthttp.MethodPost)
	cl.req.Header.SetContentType("application/json")
	cl.req.SetRequestURI(path)
	if c.cfg.TLS != nil {
		cl.req.URI().SetScheme("https") // the HostClient's
	}
	cl.req.SetBodyRaw(cl.body)
	var errs []error
	n := first
	for attempt := 0; attempt < c.cfg.MaxAttempts; attempt++ {
		if n == nil {
			n = c.any(v, cl.skip)
		}
		if n == nil { // every node tried: try one again (a lone node's hiccup)
			n = c.any(v, nil)
		}
		if n == nil {
			break
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		deadline := time.Now().Add(c.cfg.Timeout)
		ctxBound := false
		if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
			deadline, ctxBound = d, true
		}
		cl.req.URI().SetHost(n.addr)
		err := n.hc.DoDeadline(&cl.req, &cl.resp, deadline)
		if err == nil {
			if n.downUntil.Load() != 0 {
				n.downUntil.Store(0) // back: the healthy path reads no clock
			}
			return n, nil
		}
		if errors.Is(err, fasthttp.ErrNoFreeConns) {
			return nil, fmt.Errorf("cannot send to %s: %w", n.addr, err)
		}
		if ctxBound && isTimeout(err) {
			// The caller's deadline, not the node, ran out.
			return nil, fmt.Errorf("cannot send to %s: %w", n.addr, context.DeadlineExceeded)
		}
		c.markDown(n)
		errs = append(errs, fmt.Errorf("%s: %w", n.addr, err))
		if !notSent(err) {
			// The node may have read the request and decided it (a
			// timeout, a connection lost mid-exchange): sending it to
			// another node would charge it twice.
			return nil, fmt.Errorf("cannot send to %s (not sent again: it may have been decided): %w", n.addr, err)
		}
		cl.skip = append(cl.skip, n)
		n = nil
	}
	if len(errs) == 0 {
		return nil, ErrNoNodes
	}
	return nil, fmt.Errorf("%w: %w", ErrNoNodes, errors.Join(errs...))
}

// notSent reports whether err says the request never reached the node:
// the connection could not be made (refused, unreachable, dial timeout).
// Only such a request is sent to another node. (fasthttp itself resends,
// once, a request whose kept-alive connection the node had closed: see
// retryIfErr.)
func notSent(err error) bool {
	if errors.Is(err, fasthttp.ErrDialTimeout) {
		return true
	}
	var oe *net.OpError
	return errors.As(err, &oe) && oe.Op == "dial"
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, fasthttp.ErrTimeout) || errors.Is(err, context.DeadlineExceeded) ||
		(errors.As(err, &ne) && ne.Timeout())
}

// answer decodes a check-like answer (200 or 429) into res, or returns
// the error the status means.
func answer(cl *call, addr string, res *api.CheckResult) error {
	body := cl.resp.Body()
	switch st := cl.resp.StatusCode(); st {
	case fasthttp.StatusOK, fasthttp.StatusTooManyRequests:
		if err := api.DecodeCheckResult(body, res); err != nil {
			return fmt.Errorf("cannot read the answer of %s: %w", addr, err)
		}
		if res.Error != "" {
			return &StatusError{Node: addr, Status: st, Msg: res.Error}
		}
		return nil
	default:
		return statusErr(st, addr, body)
	}
}

// statusErr is the error of a non-decision answer.
func statusErr(st int, addr string, body []byte) error {
	var e api.CheckResult
	_ = api.DecodeCheckResult(body, &e)
	switch st {
	case fasthttp.StatusBadRequest:
		return &api.FieldError{Field: e.Field, Msg: e.Error}
	case fasthttp.StatusServiceUnavailable:
		if e.Error == "" {
			return fmt.Errorf("%w: %s", ErrUnavailable, addr)
		}
		return fmt.Errorf("%w: %s: %s", ErrUnavailable, addr, e.Error)
	}
	return &StatusError{Node: addr, Status: st, Msg: e.Error}
}

func errorMsg(body []byte) string {
	var e api.CheckResult
	_ = api.DecodeCheckResult(body, &e)
	return e.Error
}

// Check charges hits (0 peeks) to key of rule, at the key's owner. A
// denial is not an error: it is res.Allowed false (HTTP 429). Invalid
// input is a *api.FieldError naming "rule", "key" or "hits".
func (c *Client) Check(ctx context.Context, rule, key string, hits int64) (api.CheckResult, error) {
	var res api.CheckResult
	if fe := checkMsg(rule, key, nil, hits, -1); fe != nil {
		return res, fe
	}
	if c.closed() {
		return res, ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return res, err
	}
	cl := c.getCall()
	defer c.putCall(cl)
	v := c.view.Load()
	owner := cl.ownerOf(v, rule, key)
	if c.cfg.BatchWindow > 0 {
		return c.checkBatched(ctx, v, owner, rule, key, hits)
	}
	cl.creq = api.CheckRequest{Rule: rule, Key: key, Hits: hits, HitsSet: true}
	cl.body = api.AppendCheckRequest(cl.body[:0], &cl.creq)
	return c.checkOne(ctx, v, owner, "/v1/check", cl, rule, key)
}

// CheckDescriptors checks the rules that match descriptors (in order,
// distinct names), charging hits to each. The client cannot know their
// owners: the check goes to any node, round-robin, which forwards it.
func (c *Client) CheckDescriptors(ctx context.Context, descriptors []api.Descriptor, hits int64) (api.CheckResult, error) {
	var res api.CheckResult
	if fe := checkMsg("", "", descriptors, hits, -1); fe != nil {
		return res, fe
	}
	cl := c.getCall()
	defer c.putCall(cl)
	cl.creq = api.CheckRequest{Descriptors: descriptors, Hits: hits, HitsSet: true}
	cl.body = api.AppendCheckRequest(cl.body[:0], &cl.creq)
	return c.checkOne(ctx, c.view.Load(), nil, "/v1/check", cl, "", "")
}

// Acquire takes one slot of a concurrency rule for key at the key's
// owner. Allowed results carry the LeaseID to give to Release.
func (c *Client) Acquire(ctx context.Context, rule, key string) (api.CheckResult, error) {
	var res api.CheckResult
	if fe := checkMsg(rule, key, nil, 1, -1); fe != nil {
		return res, fe
	}
	cl := c.getCall()
	defer c.putCall(cl)
	v := c.view.Load()
	cl.body = api.AppendAcquireRequest(cl.body[:0], &api.AcquireRequest{Rule: rule, Key: key, Hits: 1})
	return c.checkOne(ctx, v, cl.ownerOf(v, rule, key), "/v1/acquire", cl, rule, key)
}

// Release frees the slot that Acquire answered with leaseID, at the
// owner of its key. rule and key may be empty when the lease id carries
// them (the node's lease ids do; older nodes left out keys too long to fit,
// and then need the key: passing the Acquire result's Rule and Key always
// works). When given, the node checks they agree with the lease id.
func (c *Client) Release(ctx context.Context, rule, key, leaseID string) error {
	if msg := leaseIDMsg(leaseID); msg != "" {
		return &api.FieldError{Field: "lease_id", Msg: msg}
	}
	if rule != "" && !api.ValidName(rule) {
		return &api.FieldError{Field: "rule", Msg: "may hold only A-Z a-z 0-9 _ . - (1..64 bytes)"}
	}
	if key != "" && !api.ValidKey(key) {
		return &api.FieldError{Field: "key", Msg: "must be 1..256 bytes of UTF-8 without control characters"}
	}
	rr, rk := rule, key
	if lr, lk, ok := splitLeaseID(leaseID); ok {
		if rr == "" {
			rr = lr
		}
		if rk == "" {
			rk = lk
		}
	}
	cl := c.getCall()
	defer c.putCall(cl)
	v := c.view.Load()
	var owner *node
	if rr != "" && rk != "" {
		owner = cl.ownerOf(v, rr, rk)
	}
	cl.body = appendRelease(cl.body[:0], rule, key, leaseID)
	n, err := c.send(ctx, v, owner, "/v1/release", cl)
	if err != nil {
		return fmt.Errorf("cannot release: %w", err)
	}
	if st := cl.resp.StatusCode(); st != fasthttp.StatusOK {
		return statusErr(st, n.addr, cl.resp.Body())
	}
	return nil
}

// appendRelease is api.AppendReleaseRequest without the empty fields.
func appendRelease(dst []byte, rule, key, leaseID string) []byte {
	dst = append(dst, `{"lease_id":`...)
	dst = api.AppendString(dst, leaseID)
	if rule != "" {
		dst = append(dst, `,"rule":`...)
		dst = api.AppendString(dst, rule)
	}
	if key != "" {
		dst = append(dst, `,"key":`...)
		dst = api.AppendString(dst, key)
	}
	return append(dst, '}')
}

// splitLeaseID reads rule and key back from a node's lease id,
// rule~base64url(key)~id (see package node); ok is false for other forms.
func splitLeaseID(s string) (rule, key string, ok bool) {
	rule, rest, ok1 := strings.Cut(s, "~")
	enc, _, ok2 := strings.Cut(rest, "~")
	if !ok1 || !ok2 || enc == "" {
		return "", "", false
	}
	k, err := base64.RawURLEncoding.DecodeString(enc)
	if err != nil || !api.ValidName(rule) || !api.ValidKey(string(k)) {
		return "", "", false
	}
	return rule, string(k), true
}

func leaseIDMsg(s string) string {
	switch {
	case s == "":
		return "required"
	case len(s) > api.MaxLeaseIDLen:
		return "longer than " + strconv.Itoa(api.MaxLeaseIDLen) + " bytes"
	}
	for i := 0; i < len(s); i++ {
		if s[i] <= 0x20 || s[i] >= 0x7f {
			return "must be printable ASCII without spaces"
		}
	}
	return ""
}

// checkOne sends cl.body and decodes the single answer. rule and key
// preset the result so that decoding their echo allocates nothing.
func (c *Client) checkOne(ctx context.Context, v *view, owner *node, path string, cl *call, rule, key string) (api.CheckResult, error) {
	res := api.CheckResult{Rule: rule, Key: key}
	n, err := c.send(ctx, v, owner, path, cl)
	if err != nil {
		return api.CheckResult{}, fmt.Errorf("cannot check: %w", err)
	}
	if err := answer(cl, n.addr, &res); err != nil {
		return api.CheckResult{}, err
	}
	return res, nil
}

// checkMsg validates one check like the node does; idx ≥ 0 names the
// field inside a batch ("checks[3].key").
func checkMsg(rule, key string, ds []api.Descriptor, hits int64, idx int) *api.FieldError {
	field := func(f string) string {
		if idx < 0 {
			return f
		}
		return "checks[" + strconv.Itoa(idx) + "]." + f
	}
	if hits < 0 || hits > api.MaxHits {
		return &api.FieldError{Field: field("hits"), Msg: "must be between 0 and 1099511627776"}
	}
	if rule != "" || key != "" {
		switch {
		case len(ds) > 0:
			return &api.FieldError{Field: field("descriptors"), Msg: "not allowed with rule"}
		case !api.ValidName(rule):
			return &api.FieldError{Field: field("rule"), Msg: "must be 1..64 bytes of A-Z a-z 0-9 _ . -"}
		case !api.ValidKey(key):
			return &api.FieldError{Field: field("key"), Msg: "must be 1..256 bytes of UTF-8 without control characters"}
		}
		return nil
	}
	switch {
	case len(ds) == 0:
		return &api.FieldError{Field: field("rule"), Msg: "required (or descriptors)"}
	case len(ds) > api.MaxDescriptors:
		return &api.FieldError{Field: field("descriptors"), Msg: "more than 16"}
	}
	for i, d := range ds {
		if !api.ValidName(d.Name) {
			return &api.FieldError{Field: field("descriptors"), Msg: "name " + strconv.Quote(d.Name) + " must be 1..64 bytes of A-Z a-z 0-9 _ . -"}
		}
		if !api.ValidKey(d.Value) {
			return &api.FieldError{Field: field("descriptors." + d.Name), Msg: "must be 1..256 bytes of UTF-8 without control characters"}
		}
		for _, e := range ds[:i] {
			if e.Name == d.Name {
				return &api.FieldError{Field: field("descriptors." + d.Name), Msg: "given twice"}
			}
		}
	}
	return nil
}

// maxChunkBody bounds the request body of one /v1/checks, so that its
// answer stays well under api.MaxBodyBytes.
const maxChunkBody = 512 << 10

// job is one POST /v1/checks: the indexes of its checks in the caller's
// slice, for one node.
type job struct {
	n   *node
	idx []int
}

// CheckMany decides checks[i] into results[i] (len(results) ≥
// len(checks)). Checks are grouped by owner, one POST /v1/checks per owner
// (chunks of at most api.MaxBatch), sent in parallel. A check by
// descriptors goes to any node. An invalid check does not fail the batch:
// its result has Error and Field ("checks[3].key") set, as the node would
// answer. The error is non-nil when some checks could not be sent or were
// refused as a whole; their results then carry the error's text, and the
// other results are valid.
func (c *Client) CheckMany(ctx context.Context, checks []api.CheckRequest, results []api.CheckResult) error {
	if len(results) < len(checks) {
		return &api.FieldError{Field: "results", Msg: "shorter than checks"}
	}
	if len(checks) == 0 {
		return nil
	}
	if c.closed() {
		return ErrClosed
	}
	v := c.view.Load()
	cl := c.getCall()
	defer c.putCall(cl)
	jobs := cl.jobs[:0]
	var fallback *node // for checks whose owner is unknown or down
	for i := range checks {
		ch := &checks[i]
		hits := ch.Hits
		if !ch.HitsSet && hits == 0 {
			hits = 1
		}
		if fe := checkMsg(ch.Rule, ch.Key, ch.Descriptors, hits, i); fe != nil {
			results[i] = api.CheckResult{Error: fe.Msg, Field: fe.Field}
			continue
		}
		var n *node
		if ch.Rule != "" {
			n = cl.ownerOf(v, ch.Rule, ch.Key)
		}
		if n == nil {
			if fallback == nil {
				fallback = c.any(v, nil)
			}
			n = fallback
		}
		j := -1
		for k := range jobs {
			if jobs[k].n == n {
				j = k
				break
			}
		}
		if j < 0 {
			if len(jobs) < cap(jobs) { // reuse the pooled index slice
				jobs = jobs[:len(jobs)+1]
				jobs[len(jobs)-1].n = n
				jobs[len(jobs)-1].idx = jobs[len(jobs)-1].idx[:0]
			} else {
				jobs = append(jobs, job{n: n})
			}
			j = len(jobs) - 1
		}
		jobs[j].idx = append(jobs[j].idx, i)
	}
	cl.jobs = jobs
	// Split into chunks the node accepts.
	chunks := cl.chunks[:0]
	defer func() { cl.chunks = chunks }()
	for _, jb := range jobs {
		start, size := 0, 0
		for k, i := range jb.idx {
			sz := len(checks[i].Rule) + len(checks[i].Key)*6 + 64
			for _, d := range checks[i].Descriptors {
				sz += len(d.Name) + len(d.Value)*6 + 8
			}
			if k > start && (k-start == api.MaxBatch || size+sz > maxChunkBody) {
				chunks = append(chunks, job{n: jb.n, idx: jb.idx[start:k]})
				start, size = k, 0
			}
			size += sz
		}
		if start < len(jb.idx) {
			chunks = append(chunks, job{n: jb.n, idx: jb.idx[start:]})
		}
	}
	if len(chunks) == 0 {
		return nil
	}
	if len(chunks) == 1 {
		return c.sendChunk(ctx, v, cl, chunks[0], checks, results)
	}
	return c.sendChunks(ctx, v, cl, chunks, checks, results)
}

// sendChunks sends chunks in parallel, the first in this goroutine.
func (c *Client) sendChunks(ctx context.Context, v *view, cl *call, chunks []job, checks []api.CheckRequest, results []api.CheckResult) error {
	errs := make([]error, len(chunks))
	var wg sync.WaitGroup
	for k := 1; k < len(chunks); k++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			jc := c.getCall()
			defer c.putCall(jc)
			errs[k] = c.sendChunk(ctx, v, jc, chunks[k], checks, results)
		}()
	}
	errs[0] = c.sendChunk(ctx, v, cl, chunks[0], checks, results)
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// sendChunk sends one chunk and copies its results into place.
func (c *Client) sendChunk(ctx context.Context, v *view, cl *call, jb job, checks []api.CheckRequest, results []api.CheckResult) error {
	cl.batch.Checks = cl.batch.Checks[:0]
	for _, i := range jb.idx {
		cl.batch.Checks = append(cl.batch.Checks, checks[i])
	}
	cl.body = api.AppendChecksRequest(cl.body[:0], &cl.batch)
	// Preset rule and key: their echo then decodes without allocating.
	cl.res = cl.res[:0]
	for _, i := range jb.idx {
		cl.res = append(cl.res, api.CheckResult{Rule: checks[i].Rule, Key: checks[i].Key})
	}
	n, err := c.send(ctx, v, jb.n, "/v1/checks", cl)
	var out []api.CheckResult
	if err == nil {
		out, err = c.batchAnswer(cl, n, len(jb.idx))
	} else {
		err = fmt.Errorf("cannot check: %w", err)
	}
	if err == nil {
		for k, i := range jb.idx {
			results[i] = out[k]
			if out[k].Field != "" {
				results[i].Field = renumber(out[k].Field, i)
			}
		}
		return nil
	}
	for _, i := range jb.idx {
		results[i] = api.CheckResult{Error: err.Error()}
	}
	return err
}

// batchAnswer decodes the answer of a /v1/checks of want checks into
// cl.res (preset with the checks' rules and keys).
func (c *Client) batchAnswer(cl *call, n *node, want int) ([]api.CheckResult, error) {
	if st := cl.resp.StatusCode(); st != fasthttp.StatusOK {
		return nil, statusErr(st, n.addr, cl.resp.Body())
	}
	out, err := api.DecodeResults(cl.resp.Body(), cl.res[:0])
	switch {
	case err != nil:
		return nil, fmt.Errorf("cannot read the answer of %s: %w", n.addr, err)
	case len(out) != want:
		return nil, fmt.Errorf("cannot read the answer of %s: %d results for %d checks", n.addr, len(out), want)
	}
	return out, nil
}

// renumber rewrites "checks[j]..." of a chunk to "checks[i]..." of the
// caller's slice.
func renumber(field string, i int) string {
	rest, ok := strings.CutPrefix(field, "checks[")
	if !ok {
		return field
	}
	_, after, ok := strings.Cut(rest, "]")
	if !ok {
		return field
	}
	return "checks[" + strconv.Itoa(i) + "]" + after
}
