package rules

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"net"
	"net/netip"
	"unicode/utf8"

	"github.com/valyala/fastjson"

	"github.com/sluicehq/sluice/node/api"
)

// Match is one rule a request matched and the request's counter key for it.
type Match struct {
	Rule *Rule
	Key  string
	// KeyMissing is set by MatchAuth when the request lacks one of the
	// rule's key values; Missing then says what to do: MissingSkip or
	// MissingDeny (Key is empty: the rule must not be decided; the caller
	// counts the skip, or denies the request), or MissingFallback (Key is
	// the fallback key: decide it as usual).
	KeyMissing bool
	Missing    MissingAction
}

// AuthPrefix is the path of the forward-auth endpoint, removed from the
// auth request's path to find the original path when no forwarded-URI
// header says it (Envoy ext_authz).
const AuthPrefix = "/v1/auth"

// MatchDescriptors appends to dst the rules reachable by descriptors d (all
// of whose descriptor names are in d, and whose match holds against the
// path, method and host descriptors when d has them), in file order, with
// their counter keys.
func (s *Set) MatchDescriptors(d []api.Descriptor, dst []Match) []Match {
	if s == nil || len(s.byDesc) == 0 {
		return dst
	}
	start := len(dst)
	for i := range d {
		for _, ri := range s.byDesc[d[i].Name] {
			r := s.rules[ri]
			key, ok := descriptorKey(r, d)
			if !ok || !routeMatchesDescriptors(&r.Match, d) {
				continue
			}
			dst = append(dst, Match{Rule: r, Key: key})
			// Keep file order: rules are indexed by their first name, so
			// matches arrive grouped by the request's descriptor order.
			for j := len(dst) - 1; j > start && dst[j-1].Rule.pos > r.pos; j-- {
				dst[j], dst[j-1] = dst[j-1], dst[j]
			}
		}
	}
	return dst
}

func descriptorValue(d []api.Descriptor, name string) (string, bool) {
	for i := range d {
		if d[i].Name == name {
			return d[i].Value, true
		}
	}
	return "", false
}

// descriptorKey builds r's key from d; ok is false when a name is missing.
func descriptorKey(r *Rule, d []api.Descriptor) (string, bool) {
	if len(r.Descriptors) == 1 {
		v, ok := descriptorValue(d, r.Descriptors[0])
		if !ok || v == "" {
			return "", false
		}
		if len(v) > api.MaxKeyLen || needsEscape(v) {
			var buf [api.MaxKeyLen * 2]byte
			return keyString(appendEscaped(buf[:0], v)), true
		}
		return v, true // the common case: the value itself, no copy
	}
	var buf [api.MaxKeyLen * 2]byte
	b := buf[:0]
	for i, name := range r.Descriptors {
		v, ok := descriptorValue(d, name)
		if !ok || v == "" {
			return "", false
		}
		if i > 0 {
			b = append(b, '|')
		}
		b = appendEscaped(b, v)
	}
	return keyString(b), true
}

// needsEscape reports whether v holds a byte that appendEscaped escapes.
func needsEscape[T string | []byte](v T) bool {
	for i := 0; i < len(v); i++ {
		if v[i] == '|' || v[i] == '\\' {
			return true
		}
	}
	return false
}

// appendEscaped appends key value v to dst with '\' and '|' escaped by a
// '\' (see "Counter keys" in the package doc): joined with '|', escaped
// values cannot be split another way.
func appendEscaped[T string | []byte](dst []byte, v T) []byte {
	if !needsEscape(v) {
		return append(dst, v...)
	}
	for i := 0; i < len(v); i++ {
		if c := v[i]; c == '|' || c == '\\' {
			dst = append(dst, '\\', c)
		} else {
			dst = append(dst, c)
		}
	}
	return dst
}

func routeMatchesDescriptors(m *Route, d []api.Descriptor) bool {
	if m.PathPrefix != "" {
		if p, ok := descriptorValue(d, "path"); ok && !hasPrefix(p, m.PathPrefix) {
			return false
		}
	}
	if len(m.Methods) > 0 {
		if meth, ok := descriptorValue(d, "method"); ok && !methodIn(m.Methods, []byte(meth)) {
			return false
		}
	}
	if m.Host != "" {
		if h, ok := descriptorValue(d, "host"); ok && !hostMatches(m.Host, []byte(h)) {
			return false
		}
	}
	return true
}

func hasPrefix[T string | []byte](s T, prefix string) bool {
	return len(s) >= len(prefix) && string(s[:len(prefix)]) == prefix
}

func methodIn(methods []string, m []byte) bool {
	for _, x := range methods {
		if len(x) == len(m) && bytes.EqualFold([]byte(x), m) {
			return true
		}
	}
	return false
}

// hostMatches matches host (normalized) against glob g.
func hostMatches(g string, host []byte) bool {
	var buf [256]byte
	return globMatch(g, normalizeHost(buf[:0], host))
}

// normalizeHost appends host lower-cased, without its port and without
// the trailing dot of a fully qualified name to dst ("[::1]:80" → "[::1]",
// "Example.COM.:443" → "example.com"). Hosts longer than 255 bytes are cut.
func normalizeHost(dst, host []byte) []byte {
	if i := bytes.LastIndexByte(host, ':'); i >= 0 && bytes.IndexByte(host[i:], ']') < 0 &&
		(host[0] == '[' || bytes.IndexByte(host[:i], ':') < 0) {
		host = host[:i]
	}
	if n := len(host); n > 1 && host[n-1] == '.' {
		host = host[:n-1]
	}
	if len(host) > 255 {
		host = host[:255]
	}
	for _, c := range host {
		if c >= 'A' && c <= 'Z' {
			c += 'a' - 'A'
		}
		dst = append(dst, c)
	}
	return dst
}

// keyString converts a built key to a string, shortened by ShortenKey. A
// long key holding what a key may not (api.TextFault: a control
// character, a byte that is not UTF-8) is not shortened: its digest would
// hide the fault. Its offending part is returned instead, which every
// front end's key validation refuses (a 400 naming the key), and which no
// valid key equals.
func keyString(b []byte) string {
	if len(b) > api.MaxKeyLen {
		if at, _ := api.TextFault(b); at >= 0 {
			return string(b[at:min(len(b), at+utf8.UTFMax)])
		}
	}
	return string(ShortenKey(b))
}

// digestKeep is how many bytes of a long key its digest form keeps at
// most: what api.MaxKeyLen leaves beside the mark and the digest.
const digestKeep = api.MaxKeyLen - len(api.LongKeyMark) - digestLen

// digestLen is the length of a SHA-256 sum in unpadded base64url.
const digestLen = 43

// ShortenKey returns the counter key of a key b built from values (see
// "Counter keys" in the package doc): b itself when it has at most
// api.MaxKeyLen bytes, else its digest form, which reuses b's array: b's
// first bytes (at most 211, cut before an escape pair or a UTF-8 sequence
// rather than inside one), api.LongKeyMark, and the SHA-256 of the whole
// of b in unpadded base64url.
func ShortenKey(b []byte) []byte {
	if len(b) <= api.MaxKeyLen {
		return b
	}
	sum := sha256.Sum256(b)
	n := 0
	for n < digestKeep {
		step := 1
		if b[n] == '\\' {
			step = 2
		}
		if n+step > digestKeep {
			break
		}
		n += step
	}
	for n > 0 && !utf8.RuneStart(b[n]) {
		n--
	}
	return base64.RawURLEncoding.AppendEncode(append(b[:n], api.LongKeyMark...), sum[:])
}

// AuthHeader is the header of a forward-auth request as MatchAuth reads
// it: *fasthttp.RequestHeader implements it.
type AuthHeader interface {
	// Peek and PeekBytes return the value of the named header (nil when
	// absent).
	Peek(name string) []byte
	PeekBytes(name []byte) []byte
	// Method, Host and RequestURI return the request line's method, the
	// Host header and the request line's URI.
	Method() []byte
	Host() []byte
	RequestURI() []byte
}

// authRequest holds the original request's identity, extracted lazily.
type authRequest struct {
	req      AuthHeader
	remoteIP net.IP

	uriDone           bool
	path, query       []byte
	qbuf              []byte // decoded query arguments
	pathBuf           []byte // the normalized path, when it must be
	jwtDone           bool
	jwt               *fastjson.Object
	parser            *fastjson.Parser
	jwtBuf            []byte
	methodDone        bool
	method            []byte
	hostDone          bool
	hostLen           int
	hostBuf           [256]byte
	ipDone            bool
	ip                []byte
	ipLen             int
	ipBuf             [64]byte
	pathWithoutPrefix bool
}

var jwtParsers fastjson.ParserPool

func (a *authRequest) release() {
	if a.parser != nil {
		jwtParsers.Put(a.parser)
	}
}

var (
	hdrForwardedURI    = []byte("X-Forwarded-Uri")
	hdrOriginalURI     = []byte("X-Original-Uri")
	hdrForwardedMethod = []byte("X-Forwarded-Method")
	hdrOriginalMethod  = []byte("X-Original-Method")
	hdrForwardedHost   = []byte("X-Forwarded-Host")
	hdrOriginalHost    = []byte("X-Original-Host")
	hdrForwardedFor    = []byte("X-Forwarded-For")
	hdrRealIP          = []byte("X-Real-Ip")
	hdrAuthorization   = []byte("Authorization")
)

func (a *authRequest) uri() {
	if a.uriDone {
		return
	}
	a.uriDone = true
	h := a.req
	u := h.PeekBytes(hdrForwardedURI)
	if len(u) == 0 {
		u = h.PeekBytes(hdrOriginalURI)
	}
	if len(u) == 0 {
		// Envoy ext_authz: the auth path followed by the original path.
		u = h.RequestURI()
		if hasPrefix(u, AuthPrefix) {
			rest := u[len(AuthPrefix):]
			switch {
			case len(rest) == 0:
				u = []byte("/")
			case rest[0] == '/':
				u = rest
			case rest[0] == '?':
				u = append([]byte("/"), rest...)
			}
		}
	}
	// An absolute URI (http://host/path?q) keeps only its path and query.
	if i := bytes.Index(u, []byte("://")); i >= 0 && bytes.IndexByte(u[:i], '/') < 0 {
		rest := u[i+3:]
		if j := bytes.IndexAny(rest, "/?"); j >= 0 {
			u = rest[j:]
		} else {
			u = []byte("/")
		}
	}
	if i := bytes.IndexByte(u, '#'); i >= 0 {
		u = u[:i]
	}
	if i := bytes.IndexByte(u, '?'); i >= 0 {
		a.path, a.query = u[:i], u[i+1:]
	} else {
		a.path = u
	}
	if len(a.path) == 0 {
		a.path = []byte("/")
	}
	// Gateways forward the raw URI but route on the normalized path: match
	// and key on that one, or "/%61pi/" escapes a rule on "/api/".
	if bytes.IndexByte(a.path, '%') >= 0 || bytes.Contains(a.path, []byte("//")) || bytes.Contains(a.path, []byte("/.")) {
		a.pathBuf = appendNormalPath(a.pathBuf[:0], a.path) // decodes %XX, merges slashes, resolves dot segments
		a.path = a.pathBuf
	}
}

func (a *authRequest) getMethod() []byte {
	if !a.methodDone {
		a.methodDone = true
		h := a.req
		a.method = h.PeekBytes(hdrForwardedMethod)
		if len(a.method) == 0 {
			a.method = h.PeekBytes(hdrOriginalMethod)
		}
		if len(a.method) == 0 {
			a.method = h.Method()
		}
	}
	return a.method
}

// getHost returns the original host, lower-cased, without its port.
func (a *authRequest) getHost() []byte {
	if !a.hostDone {
		a.hostDone = true
		h := a.req
		host := firstListItem(h.PeekBytes(hdrForwardedHost))
		if len(host) == 0 {
			host = h.PeekBytes(hdrOriginalHost)
		}
		if len(host) == 0 {
			host = h.Host()
		}
		// Keep a length, not a slice of hostBuf: a pointer from a into
		// itself would move the whole authRequest to the heap.
		a.hostLen = len(normalizeHost(a.hostBuf[:0], host))
	}
	return a.hostBuf[:a.hostLen]
}

func (a *authRequest) getIP() []byte {
	if !a.ipDone {
		a.ipDone = true
		h := a.req
		a.ip = firstListItem(h.PeekBytes(hdrForwardedFor))
		if len(a.ip) == 0 {
			a.ip = bytes.TrimSpace(h.PeekBytes(hdrRealIP))
		}
		if len(a.ip) == 0 {
			if ip, ok := netip.AddrFromSlice(a.remoteIP); ok {
				a.ipLen = len(ip.Unmap().AppendTo(a.ipBuf[:0]))
			}
		}
	}
	if len(a.ip) == 0 {
		return a.ipBuf[:a.ipLen]
	}
	return a.ip
}

// firstListItem returns the first element of a comma list, trimmed.
func firstListItem(v []byte) []byte {
	if i := bytes.IndexByte(v, ','); i >= 0 {
		v = v[:i]
	}
	return bytes.TrimSpace(v)
}

func (a *authRequest) queryArg(name string) []byte {
	a.uri()
	if len(a.query) == 0 {
		return nil
	}
	var v []byte
	a.qbuf, v = queryArg(a.qbuf, a.query, name)
	return v
}

// claim returns the value of a JWT claim from the unverified payload of the
// Authorization bearer token, or nil.
func (a *authRequest) claim(name string, buf []byte) []byte {
	if !a.jwtDone {
		a.jwtDone = true
		a.jwt = a.parseJWT()
	}
	if a.jwt == nil {
		return nil
	}
	v := a.jwt.Get(name)
	if v == nil {
		return nil
	}
	switch v.Type() {
	case fastjson.TypeString:
		b, _ := v.StringBytes()
		return b
	case fastjson.TypeNumber:
		return v.MarshalTo(buf)
	case fastjson.TypeTrue:
		return append(buf, "true"...)
	case fastjson.TypeFalse:
		return append(buf, "false"...)
	}
	return nil
}

func (a *authRequest) parseJWT() *fastjson.Object {
	auth := a.req.PeekBytes(hdrAuthorization)
	const bearer = "bearer "
	if len(auth) <= len(bearer) || !bytes.EqualFold(auth[:len(bearer)], []byte(bearer)) {
		return nil
	}
	tok := bytes.TrimSpace(auth[len(bearer):])
	first := bytes.IndexByte(tok, '.')
	if first < 0 {
		return nil
	}
	payload := tok[first+1:]
	second := bytes.IndexByte(payload, '.')
	if second < 0 {
		return nil
	}
	payload = bytes.TrimRight(payload[:second], "=")
	if len(payload) > 16<<10 {
		return nil
	}
	n := base64.RawURLEncoding.DecodedLen(len(payload))
	if cap(a.jwtBuf) < n {
		a.jwtBuf = make([]byte, n)
	}
	m, err := base64.RawURLEncoding.Decode(a.jwtBuf[:n], payload)
	if err != nil {
		return nil
	}
	a.parser = jwtParsers.Get()
	v, err := a.parser.ParseBytes(a.jwtBuf[:m])
	if err != nil {
		return nil
	}
	o, err := v.Object()
	if err != nil {
		return nil
	}
	return o
}

// value returns the value of src for the request (appending to buf when
// it must be built), or nil when the request does not have it.
func (a *authRequest) value(src Source, buf []byte) []byte {
	switch src.Kind {
	case SourceHeader:
		return a.req.Peek(src.Name)
	case SourceIP:
		return a.getIP()
	case SourceQuery:
		return a.queryArg(src.Name)
	case SourceJWT:
		return a.claim(src.Name, buf)
	case SourcePath:
		a.uri()
		return a.path
	case SourceMethod:
		return a.getMethod()
	case SourceHost:
		return a.getHost()
	}
	return nil
}

func (a *authRequest) routeMatches(m *Route) bool {
	if m.PathPrefix != "" {
		a.uri()
		if !hasPrefix(a.path, m.PathPrefix) {
			return false
		}
	}
	if len(m.Methods) > 0 && !methodIn(m.Methods, a.getMethod()) {
		return false
	}
	if m.Host != "" && !hostMatches(m.Host, a.getHost()) {
		return false
	}
	return true
}

// MatchAuth appends to dst the rules that apply to the forward-auth request
// req (see the package doc for where each part of the identity comes from)
// and its counter key for each, in file order. A rule whose match holds but
// whose key the request lacks is appended too, with KeyMissing set and its
// on_missing_key in Missing (see Match): callers must not decide those
// with an empty Key. remoteIP is the connection's
// peer address, used when no X-Forwarded-For or X-Real-IP header is given.
func (s *Set) MatchAuth(req AuthHeader, remoteIP net.IP, dst []Match) []Match {
	if s == nil || len(s.auth) == 0 {
		return dst
	}
	a := authRequest{req: req, remoteIP: remoteIP}
	defer a.release()
	var kb [api.MaxKeyLen * 2]byte
	for _, r := range s.auth {
		if !a.routeMatches(&r.Match) {
			continue
		}
		if key, ok := a.key(kb[:0], r.Sources); ok {
			dst = append(dst, Match{Rule: r, Key: keyString(key)})
			continue
		}
		m := Match{Rule: r, Missing: r.OnMissingKey.Action, KeyMissing: true}
		if m.Missing == MissingFallback {
			key, ok := a.key(append(kb[:0], fallbackPrefix...), r.OnMissingKey.Fallback)
			if !ok {
				m.Missing = MissingSkip
			} else {
				m.Key = keyString(key)
			}
		}
		dst = append(dst, m)
	}
	return dst
}

// fallbackPrefix starts every fallback key (on_missing_key: sources). No
// key made of the rule's own sources starts with it: in those, '\' only
// ever precedes '\' or '|' (see "Counter keys").
const fallbackPrefix = `\?`

// key appends to dst the counter key of srcs for the request; ok is false
// when one of the values is missing or empty.
func (a *authRequest) key(dst []byte, srcs []Source) ([]byte, bool) {
	for i, src := range srcs {
		v := a.value(src, nil)
		if len(v) == 0 {
			return dst, false
		}
		if i > 0 {
			dst = append(dst, '|')
		}
		dst = appendEscaped(dst, v)
	}
	return dst, true
}
