package bench

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"time"

	"github.com/valyala/fasthttp"
)

// Canned is one recorded answer: what the node answered to one request
// shape. The ceiling server replays it.
type Canned struct {
	Status  int         `json:"status"`
	Headers [][2]string `json:"headers"`
	Body    string      `json:"body"`
}

// CannedSet maps a path (/v1/check, /v1/checks, /v1/auth) to its answer.
type CannedSet map[string]Canned

// SyntheticCanned is the ceiling's answers when no node could be probed:
// the answer body and headers of an allowed check as a node writes them,
// and a batch of batch such results.
func SyntheticCanned(batch int) CannedSet {
	one := `{"allowed":true,"rule":"bench","key":"c-00000","limit":100,"remaining":99,"reset_ms":10,"retry_after_ms":0}`
	hdr := [][2]string{
		{"Content-Type", "application/json"},
		{"RateLimit-Policy", `"bench";q=100;w=1`},
		{"RateLimit", `"bench";r=99;t=1`},
		{"X-RateLimit-Limit", "100"},
		{"X-RateLimit-Remaining", "99"},
		{"X-RateLimit-Reset", "1"},
	}
	var b strings.Builder
	b.WriteString(`{"results":[`)
	for i := range batch {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(one)
	}
	b.WriteString("]}")
	return CannedSet{
		"/v1/check":  {Status: 200, Headers: hdr, Body: one},
		"/v1/checks": {Status: 200, Headers: hdr[:1], Body: b.String()},
		"/v1/auth":   {Status: 200, Headers: hdr[1:], Body: ""},
	}
}

// CeilingHandler is a bare fasthttp handler that answers each path with its
// canned answer and does no work: the most any server on fasthttp can do
// with responses of that size on this machine. Unknown paths get 404.
func CeilingHandler(set CannedSet) fasthttp.RequestHandler {
	type answer struct {
		status  int
		headers [][2][]byte
		body    []byte
	}
	m := map[string]*answer{}
	for path, c := range set {
		a := &answer{status: c.Status, body: []byte(c.Body)}
		for _, h := range c.Headers {
			a.headers = append(a.headers, [2][]byte{[]byte(h[0]), []byte(h[1])})
		}
		m[path] = a
	}
	return func(ctx *fasthttp.RequestCtx) {
		path := ctx.Path()
		a := m[string(path)]
		if a == nil && len(path) > len("/v1/auth") && string(path[:len("/v1/auth/")]) == "/v1/auth/" {
			a = m["/v1/auth"]
		}
		if a == nil {
			ctx.SetStatusCode(fasthttp.StatusNotFound)
			return
		}
		ctx.SetStatusCode(a.status)
		for _, h := range a.headers {
			ctx.Response.Header.SetCanonical(h[0], h[1])
		}
		ctx.SetBody(a.body)
	}
}

// ServeCeiling serves CeilingHandler on ln until it is closed. It is what
// `sluice-bench ceiling` runs, as its own process so its CPU is measured
// like the node's.
func ServeCeiling(ln net.Listener, set CannedSet) error {
	// fasthttp's defaults, like the node's server (which also sends no
	// Server header): only the handler differs.
	s := &fasthttp.Server{
		Handler:               CeilingHandler(set),
		NoDefaultServerHeader: true,
		ReadTimeout:           30 * time.Second,
		IdleTimeout:           30 * time.Second,
		MaxRequestBodySize:    1 << 20,
	}
	return s.Serve(ln)
}

// LoadCanned reads a CannedSet written by SaveCanned.
func LoadCanned(path string) (CannedSet, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("cannot read canned answers: %w", err)
	}
	set, err := ParseCanned(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return set, nil
}

// ParseCanned parses the JSON of a CannedSet and checks every answer
// (errors name the path and field).
func ParseCanned(b []byte) (CannedSet, error) {
	var set CannedSet
	if err := json.Unmarshal(b, &set); err != nil {
		return nil, fmt.Errorf("cannot parse canned answers: %w", err)
	}
	if len(set) == 0 {
		return nil, errors.New("canned: no answers")
	}
	for p, c := range set {
		if c.Status < 100 || c.Status > 599 {
			return nil, fmt.Errorf("canned %s: status: %d is not an HTTP status", p, c.Status)
		}
		if !strings.HasPrefix(p, "/") {
			return nil, fmt.Errorf("canned %q: path: must start with /", p)
		}
		for _, h := range c.Headers {
			if h[0] == "" || strings.ContainsAny(h[0]+h[1], "\r\n") {
				return nil, fmt.Errorf("canned %s: headers: bad header %q", p, h[0])
			}
		}
	}
	return set, nil
}

// SaveCanned writes set for LoadCanned.
func SaveCanned(path string, set CannedSet) error {
	b, err := json.MarshalIndent(set, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o644)
}

// skipHeaders are set by every fasthttp server itself.
var skipHeaders = map[string]bool{"Date": true, "Server": true, "Content-Length": true, "Connection": true}

// CaptureCanned asks the limiter at addr one request of each shape the
// suite sends (fresh keys, so every answer is an allowed one) and records
// the answers, so the ceiling replays answers of exactly the node's size.
func CaptureCanned(addr, rule string, batch int) (CannedSet, error) {
	keys := KeyConfig{Keys: batch, Prefix: "capture-" + fmt.Sprint(time.Now().UnixNano()%1e9) + "-"}.KeyNames()
	set := CannedSet{}
	for _, kind := range []HTTPKind{Single, Batch, ForwardAuth} {
		d, err := NewHTTPDriver(HTTPConfig{Kind: kind, Addr: addr, Conns: 1, Rule: rule, Keys: keys})
		if err != nil {
			return nil, err
		}
		s, _ := d.NewSession()
		hs := s.(*httpSession)
		n := 1
		if kind == Batch {
			n = batch
		}
		idx := make([]int32, n)
		for i := range idx {
			idx[i] = int32(i)
		}
		out := make([]Outcome, n)
		if err := hs.Do(idx, out); err != nil {
			d.Close()
			return nil, fmt.Errorf("cannot capture %s answer: %w", kind, err)
		}
		c := Canned{Status: hs.resp.StatusCode(), Body: string(hs.resp.Body())}
		for k, v := range hs.resp.Header.All() {
			if !skipHeaders[string(k)] {
				c.Headers = append(c.Headers, [2]string{string(k), string(v)})
			}
		}
		set[string(hs.req.URI().Path())] = c
		d.Close()
	}
	return set, nil
}
