package node

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"

	"github.com/valyala/fasthttp"

	"github.com/sluicehq/sluice/node/rules"
)

// The admin API of rules (docs/rules.md; sources and
// versions in rulesource.go). Every endpoint needs the admin guard
// ([Node.RequireAdmin], guard.go: the bearer token, or loopback without
// one): 401 without credentials, 403 with wrong ones (or from another
// host when the node has no token). Every answer but a guard refusal
// carries ETag: "N", the version of the set it read or wrote.
//
//	GET    /v1/rules              {"version":N,"source":"file|store|data_dir|memory","file":"...","rules":[rule,...],
//	                              "algorithms":[{"name","leased","slots","fields"},...]}
//	PUT    /v1/rules              a whole rule file (YAML or JSON {"rules":[...]}) as one version → change
//	POST   /v1/rules:validate     the same body: what PUT /v1/rules would change, nothing written → change
//	POST   /v1/rules:test         {"method","path","host","ip","headers":{...}} → {"version":N,"matches":[{"rule","key"}]}
//	GET    /v1/rules/{name}       the rule
//	PUT    /v1/rules/{name}       a rule (JSON or YAML, the file's fields; name optional) → change
//	DELETE /v1/rules/{name}       → change
//
// change is {"version":N,"previous_version":M,"dry_run":false,"added":[],
// "removed":[],"changed":[]} (rule names; changed: same name, new
// meaning). ?dry_run=1 on a PUT or DELETE validates and answers the
// change without writing it. A write that changes no rule's meaning
// keeps the version; every other write gives a new one. If-Match (RFC
// 9110 §13.1.1) makes a write fail with 412 unless one of its entity tags
// is the current ETag ("N"; also spelt N); tags are opaque, so any other
// one, well-formed or not, is 412, and so is a weak one (W/"N": If-Match
// compares strongly); "*" matches the current set.
// Errors: 400 {"error","field"}
// for an invalid rule (field: "limit", "overrides[0].key"; for a whole
// file "rules[2].period") with nothing changed, 404 for an unknown rule,
// 409 when the rules come from a file (the message names it), 412 for a
// stale If-Match, 503 when the store cannot be reached.

// Errors of the admin API (errorStatus maps them).
var (
	// ErrReadOnlyRules means the rules come from a file: the admin API
	// cannot change them (409).
	ErrReadOnlyRules = errors.New("rules are read-only")
	// ErrStaleVersion means If-Match named a version that is not the
	// current one (412).
	ErrStaleVersion = errors.New("stale version")
)

// maxActorLen bounds the X-Sluice-Actor value logged with a change.
const maxActorLen = 64

// isRulesPath reports whether path is one of the admin rule endpoints'.
func isRulesPath(path []byte) bool {
	const p = "/v1/rules"
	return len(path) >= len(p) && string(path[:len(p)]) == p &&
		(len(path) == len(p) || path[len(p)] == '/' || path[len(p)] == ':')
}

// rulesAdmin serves /v1/rules, /v1/rules:validate, /v1/rules:test and
// /v1/rules/{name}.
func (n *Node) rulesAdmin(ctx *fasthttp.RequestCtx) {
	if !n.RequireAdmin(ctx) {
		return
	}
	path := string(ctx.Path())
	switch {
	case path == "/v1/rules":
		switch {
		case ctx.IsGet() || ctx.IsHead():
			n.rulesList(ctx)
		case ctx.IsPut():
			n.rulesWrite(ctx, "apply", "", dryRun(ctx), n.buildFile(ctx.PostBody()))
		default:
			n.writeError(ctx, ErrMethodNotAllowed)
		}
	case path == "/v1/rules:validate":
		if n.requirePost(ctx) {
			n.rulesWrite(ctx, "apply", "", true, n.buildFile(ctx.PostBody()))
		}
	case path == "/v1/rules:test":
		if n.requirePost(ctx) {
			n.rulesTest(ctx)
		}
	case strings.HasPrefix(path, "/v1/rules/"):
		name := path[len("/v1/rules/"):]
		switch {
		case ctx.IsGet() || ctx.IsHead():
			n.ruleGet(ctx, name)
		case ctx.IsPut():
			n.rulesWrite(ctx, "put", name, dryRun(ctx), n.buildPut(name, ctx.PostBody()))
		case ctx.IsDelete():
			n.rulesWrite(ctx, "delete", name, dryRun(ctx), buildDelete(name))
		default:
			n.writeError(ctx, ErrMethodNotAllowed)
		}
	default:
		n.writeError(ctx, ErrNotFound)
	}
}

// dryRun reports whether the request asks for a dry run (?dry_run=1 or
// true).
func dryRun(ctx *fasthttp.RequestCtx) bool {
	v := string(ctx.QueryArgs().Peek("dry_run"))
	b, err := strconv.ParseBool(v)
	return err == nil && b
}

// rulesBody is the body of GET /v1/rules: the rules, and the algorithms
// a rule may name (lease's table, as rules.Algorithms describes them: the
// dashboard's rule editor offers them).
type rulesBody struct {
	Version    uint64            `json:"version"`
	Source     string            `json:"source"`
	File       string            `json:"file,omitempty"`
	Rules      []rules.Spec      `json:"rules"`
	Algorithms []rules.Algorithm `json:"algorithms"`
}

// changeBody is the answer of a write or a dry run.
type changeBody struct {
	Version         uint64   `json:"version"`
	PreviousVersion uint64   `json:"previous_version"`
	DryRun          bool     `json:"dry_run"`
	Added           []string `json:"added"`
	Removed         []string `json:"removed"`
	Changed         []string `json:"changed"`
}

func (n *Node) rulesList(ctx *fasthttp.RequestCtx) {
	ra := &n.ra
	ra.mu.Lock()
	t, v := n.currentLocked()
	body := rulesBody{Version: v, Source: ra.sourceLocked(), File: ra.cfg.File}
	ra.mu.Unlock()
	if t == nil {
		n.writeError(ctx, ErrNotReady)
		return
	}
	body.Rules, body.Algorithms = t.Set().Specs(), rules.Algorithms()
	n.writeJSON(ctx, v, body)
}

func (n *Node) ruleGet(ctx *fasthttp.RequestCtx, name string) {
	ra := &n.ra
	ra.mu.Lock()
	t, v := n.currentLocked()
	ra.mu.Unlock()
	if t == nil {
		n.writeError(ctx, ErrNotReady)
		return
	}
	r := t.Set().Get(name)
	if r == nil {
		n.writeErrorVersion(ctx, v, unknownRule(name))
		return
	}
	n.writeJSON(ctx, v, r.Spec)
}

// unknownRule is the 404 of a rule that does not exist.
func unknownRule(name string) error {
	return fmt.Errorf("%w: no rule named %s", ErrNotFound, strconv.Quote(name))
}

// builder makes the next rule set from the current one; its error is
// answered as is (a 400 names the field).
type builder func(cur *rules.Set) (*rules.Set, error)

// buildFile replaces the whole set with a rule file.
func (n *Node) buildFile(body []byte) builder {
	return func(*rules.Set) (*rules.Set, error) {
		s, err := rules.Parse(body)
		if err != nil {
			return nil, ruleFieldError(err, true)
		}
		return s, nil
	}
}

// buildPut adds or replaces the rule name with body.
func (n *Node) buildPut(name string, body []byte) builder {
	return func(cur *rules.Set) (*rules.Set, error) {
		spec, err := rules.ParseSpec(body)
		if err != nil {
			return nil, ruleFieldError(err, false)
		}
		switch {
		case spec.Name == "":
			spec.Name = name
		case spec.Name != name:
			return nil, fieldError("name", "the body's name "+strconv.Quote(spec.Name)+" is not the path's "+strconv.Quote(name))
		}
		s, err := cur.With(spec)
		if err != nil {
			return nil, ruleFieldError(err, false)
		}
		return s, nil
	}
}

func buildDelete(name string) builder {
	return func(cur *rules.Set) (*rules.Set, error) {
		s, ok := cur.Without(name)
		if !ok {
			return nil, unknownRule(name)
		}
		return s, nil
	}
}

// ruleFieldError turns a validation error into a 400 naming the field:
// "limit", or for a whole file "rules[2].limit".
func ruleFieldError(err error, file bool) error {
	var re *rules.Error
	if !errors.As(err, &re) {
		return fieldError("", err.Error())
	}
	field := re.Field
	if file && re.Index >= 0 {
		field = "rules[" + strconv.Itoa(re.Index) + "]"
		if re.Field != "" {
			field += "." + re.Field
		}
	}
	return fieldError(field, re.Error())
}

// ifMatch reads If-Match (RFC 9110 §13.1.1): the entity tags it lists,
// and whether it sets a condition (absent or "*" do not: "*" matches any
// current set, and a node answering has one). Tags are opaque: one that
// is not an ETag this node gave simply does not match (412). A tag is
// compared without its quotes, so that a bare version (3) matches too. A
// weak tag (W/"3") never matches: If-Match uses the strong comparison, and
// a weak validator cannot vouch that a write starts from this set.
func ifMatch(ctx *fasthttp.RequestCtx) (tags []string, conditional bool) {
	h := strings.TrimSpace(string(ctx.Request.Header.Peek(fasthttp.HeaderIfMatch)))
	if h == "" || h == "*" {
		return nil, false
	}
	for part := range strings.SplitSeq(h, ",") {
		p := strings.TrimSpace(part)
		if strings.HasPrefix(p, "W/") {
			continue // a weak tag: it matches nothing
		}
		p = strings.TrimSuffix(strings.TrimPrefix(p, `"`), `"`)
		if p == "*" {
			return nil, false
		}
		tags = append(tags, p)
	}
	return tags, true
}

// matches reports whether one of the If-Match tags is version v's ETag.
func matches(tags []string, v uint64) bool {
	want := strconv.FormatUint(v, 10)
	for _, t := range tags {
		if t == want {
			return true
		}
	}
	return false
}

// maxWriteAttempts bounds the retries of a write without If-Match whose
// save lost a race with another node's.
const maxWriteAttempts = 3

// rulesWrite builds the next set from the current one, and unless dry
// saves it to the store, installs it, logs and announces it.
func (n *Node) rulesWrite(ctx *fasthttp.RequestCtx, op, name string, dry bool, build builder) {
	want, conditional := ifMatch(ctx)
	ra := &n.ra
	ra.mu.Lock()
	defer ra.mu.Unlock()
	// replace, when set, is a stored version to overwrite although this
	// node does not hold it: the store lost its data (0), or holds a set
	// that does not validate.
	var replace *uint64
	for attempt := 1; ; attempt++ {
		t, cur := n.currentLocked()
		if t == nil {
			n.writeError(ctx, ErrNotReady)
			return
		}
		if ra.source == SourceFile && !dry {
			n.writeErrorVersion(ctx, cur, fmt.Errorf("%w: they come from the file %s (sluiced -rules); edit the file instead",
				ErrReadOnlyRules, ra.cfg.File))
			return
		}
		if conditional && !matches(want, cur) {
			n.writeErrorVersion(ctx, cur, fmt.Errorf("%w: If-Match %s, but the current version is %d", ErrStaleVersion,
				string(ctx.Request.Header.Peek(fasthttp.HeaderIfMatch)), cur))
			return
		}
		next, err := build(t.Set())
		if err == nil {
			err = n.CheckRules(next)
		}
		if err != nil {
			n.writeErrorVersion(ctx, cur, err)
			return
		}
		added, removed, changed := rules.Diff(t.Set(), next)
		ch := changeBody{Version: cur, PreviousVersion: cur, DryRun: dry,
			Added: nonNil(added), Removed: nonNil(removed), Changed: nonNil(changed)}
		// An unchanged set keeps its version, unless it came unsigned
		// from the store (saving it signs it), or the store does not hold
		// it as this node would write it (a set edited or injected there):
		// the write replaces that.
		if dry || (next.Equal(t.Set()) && !ra.unsigned && replace == nil && n.storedLocked(cur, next)) {
			n.writeJSON(ctx, cur, ch)
			return
		}
		version := cur + 1
		if st := ra.cfg.Store; st != nil {
			names, specs, err := encodeSpecs(next)
			if err != nil {
				n.writeErrorVersion(ctx, cur, err)
				return
			}
			expect := cur
			if replace != nil {
				expect = *replace
			}
			nv := n.nextVersionLocked(expect)
			var sig []byte
			if ra.signer != nil {
				sig = ra.signer.sign(nv, specs)
			}
			sctx, cancel := context.WithTimeout(context.Background(), ra.cfg.LoadTimeout)
			v, saved, err := st.SaveRules(sctx, expect, nv, names, specs, sig)
			cancel()
			if err != nil {
				n.writeErrorVersion(ctx, cur, fmt.Errorf("cannot save rules: %w", err))
				return
			}
			if !saved {
				// The store does not hold this node's version. Another
				// node wrote first: with If-Match the caller's version is
				// stale; without, build again on the stored set. The store
				// lost its data, or holds a set this node refuses (invalid,
				// unsigned, badly signed, rolled back): this node's set is
				// the current one, and the write replaces the stored one.
				_, lerr := n.loadStoreLocked()
				switch {
				case lerr != nil && ra.bad == v:
					n.log.Warn("the stored rules were refused; this write replaces them with this node's rules and its change",
						"stored_version", v, "err", lerr)
					replace = &v
				case lerr != nil:
					n.writeErrorVersion(ctx, cur, fmt.Errorf("cannot reload the rules after a concurrent write: %w", lerr))
					return
				case v == 0: // the store lost its data: store ours again
					replace = &v
				case conditional:
					_, now := n.currentLocked()
					n.writeErrorVersion(ctx, now, fmt.Errorf("%w: another write made version %d", ErrStaleVersion, now))
					return
				default:
					replace = nil
				}
				if attempt >= maxWriteAttempts {
					_, now := n.currentLocked()
					n.writeErrorVersion(ctx, now, fmt.Errorf("%w: the rules kept changing under this write (version %d); try again", ErrStaleVersion, now))
					return
				}
				continue
			}
			version = v
			ra.loaded, ra.unsigned = true, false
		}
		n.installLocked(next, version)
		ch.Version = version
		n.log.Info("rules changed", "op", op, "rule", name, "caller", caller(ctx), "actor", actor(ctx),
			"old_version", cur, "new_version", version, "source", ra.sourceLocked(),
			"added", added, "removed", removed, "changed", changed)
		n.announceRules(version)
		n.writeJSON(ctx, version, ch)
		return
	}
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// caller is the remote address of an admin request.
func caller(ctx *fasthttp.RequestCtx) string {
	if a := ctx.RemoteAddr(); a != nil {
		return a.String()
	}
	return ""
}

// actor is the X-Sluice-Actor header (the sluice CLI sends user@host),
// bounded: who made a change, as the caller says.
func actor(ctx *fasthttp.RequestCtx) string {
	a := string(ctx.Request.Header.Peek("X-Sluice-Actor"))
	if len(a) > maxActorLen {
		a = a[:maxActorLen]
	}
	q := strconv.QuoteToGraphic(a)
	return q[1 : len(q)-1]
}

// testRequest is the body of POST /v1/rules:test: the original request of
// a forward-auth check, described.
type testRequest struct {
	Method  string            `json:"method"`
	Path    string            `json:"path"`
	Host    string            `json:"host"`
	IP      string            `json:"ip"`
	Headers map[string]string `json:"headers"`
}

type testMatch struct {
	Rule string `json:"rule"`
	Key  string `json:"key"`
}

type testBody struct {
	Version uint64      `json:"version"`
	Matches []testMatch `json:"matches"`
}

// rulesTest answers which rules a described request matches, and with
// which counter key, as /v1/auth would see it.
func (n *Node) rulesTest(ctx *fasthttp.RequestCtx) {
	var tr testRequest
	dec := json.NewDecoder(strings.NewReader(string(ctx.PostBody())))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&tr); err != nil {
		n.writeError(ctx, fieldError("", "cannot parse the request: "+err.Error()))
		return
	}
	var req fasthttp.Request
	method := tr.Method
	if method == "" {
		method = fasthttp.MethodGet
	}
	path := tr.Path
	if path == "" {
		path = "/"
	}
	if !strings.HasPrefix(path, "/") {
		n.writeError(ctx, fieldError("path", "must start with /"))
		return
	}
	req.Header.SetMethod(method)
	req.SetRequestURI("/v1/auth")
	req.Header.Set("X-Forwarded-Uri", path)
	req.Header.Set("X-Forwarded-Method", method)
	if tr.Host != "" {
		req.Header.Set("X-Forwarded-Host", tr.Host)
	}
	ip := net.IPv4(127, 0, 0, 1)
	if tr.IP != "" {
		ip = net.ParseIP(tr.IP)
		if ip == nil {
			n.writeError(ctx, fieldError("ip", "not an IP address"))
			return
		}
	}
	for k, v := range tr.Headers {
		req.Header.Set(k, v)
	}
	ra := &n.ra
	ra.mu.Lock()
	t, v := n.currentLocked()
	ra.mu.Unlock()
	if t == nil {
		n.writeError(ctx, ErrNotReady)
		return
	}
	body := testBody{Version: v, Matches: []testMatch{}}
	for _, m := range t.Set().MatchAuth(&req.Header, ip, nil) {
		if m.KeyMissing && m.Missing == rules.MissingSkip {
			continue // the rule does not apply (on_missing_key: skip)
		}
		// on_missing_key: deny appears with an empty key.
		body.Matches = append(body.Matches, testMatch{Rule: m.Rule.Name, Key: strings.Clone(m.Key)})
	}
	n.writeJSON(ctx, v, body)
}

// writeJSON answers 200 with body and ETag v.
func (n *Node) writeJSON(ctx *fasthttp.RequestCtx, v uint64, body any) {
	b, err := json.Marshal(body)
	if err != nil {
		n.writeError(ctx, err)
		return
	}
	ctx.Response.Header.Set(fasthttp.HeaderETag, formatVersion(v))
	ctx.SetContentTypeBytes(contentTypeJSON)
	ctx.SetBody(append(b, '\n'))
}

// writeErrorVersion answers err with ETag v.
func (n *Node) writeErrorVersion(ctx *fasthttp.RequestCtx, v uint64, err error) {
	ctx.Response.Header.Set(fasthttp.HeaderETag, formatVersion(v))
	n.writeError(ctx, err)
}
