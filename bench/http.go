package bench

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/valyala/fasthttp"
)

// HTTPKind is the shape of the requests an HTTP driver sends.
type HTTPKind uint8

// The HTTP driver kinds.
const (
	// Single sends POST /v1/check {"rule","key","hits"}, one request per
	// check, over many connections.
	Single HTTPKind = iota + 1
	// Pipelined sends the same requests pipelined over few connections.
	Pipelined
	// Batch sends POST /v1/checks {"checks":[...]}.
	Batch
	// ForwardAuth sends GET /v1/auth with the key in a header, as a gateway
	// would.
	ForwardAuth
	// Raw sends any method, URL and body with {{key}} replaced: it drives
	// other limiters' HTTP APIs with the same workload.
	Raw
)

var kindNames = [...]string{Single: "http-single", Pipelined: "http-pipelined", Batch: "http-batch", ForwardAuth: "http-auth", Raw: "http-raw"}

func (k HTTPKind) String() string {
	if k > 0 && int(k) < len(kindNames) {
		return kindNames[k]
	}
	return fmt.Sprintf("http-kind(%d)", k)
}

// ParseHTTPKind parses "single", "pipelined", "batch", "auth" or "raw".
func ParseHTTPKind(s string) (HTTPKind, error) {
	for k, n := range kindNames {
		if n != "" && (n == s || strings.TrimPrefix(n, "http-") == s) {
			return HTTPKind(k), nil
		}
	}
	return 0, fmt.Errorf("driver: unknown driver %q (want single, pipelined, batch, auth or raw)", s)
}

// HTTPConfig configures an HTTP driver.
type HTTPConfig struct {
	Kind HTTPKind
	// Addr is the limiter's host:port.
	Addr string
	// Conns is the maximum number of connections; 0 means 64 (Pipelined:
	// 4, each carrying many requests in flight).
	Conns int
	// Timeout bounds each request; 0 means 2s.
	Timeout time.Duration
	// Rule is the rule name sent with each check; "" means "bench".
	Rule string
	// Hits per check; 0 means 1.
	Hits int64
	// Keys is the key table (KeyConfig.KeyNames).
	Keys [][]byte
	// AuthHeader carries the key for ForwardAuth; "" means X-Bench-Key.
	AuthHeader string

	// Raw only. Method defaults to POST. URL is a path with an optional
	// query ("/api/limit?key={{key}}"); Body is a template; both may hold
	// {{key}}. Success is the status that means allowed (0: 200); Deny the
	// one that means denied (0: 429). Header lines are "Name: value".
	Method  string
	URL     string
	Body    string
	Success int
	Deny    int
	Headers []string
}

// KeyPlaceholder is replaced by the key in Raw templates.
const KeyPlaceholder = "{{key}}"

type httpDriver struct {
	cfg  HTTPConfig
	doer interface {
		DoDeadline(*fasthttp.Request, *fasthttp.Response, time.Time) error
	}
	host     *fasthttp.HostClient
	pipe     *fasthttp.PipelineClient
	hits     []byte // decimal
	urlParts [][]byte
	bodyPart [][]byte
	headers  [][2]string
	once     sync.Once
}

// NewHTTPDriver validates cfg (errors name the field) and returns a Driver.
func NewHTTPDriver(cfg HTTPConfig) (Driver, error) {
	if cfg.Kind < Single || cfg.Kind > Raw {
		return nil, errors.New("driver: unknown HTTP driver kind")
	}
	if cfg.Addr == "" {
		return nil, errors.New("addr: required")
	}
	if len(cfg.Keys) == 0 {
		return nil, errors.New("keys: empty key table")
	}
	if cfg.Conns == 0 {
		cfg.Conns = 64
		if cfg.Kind == Pipelined {
			cfg.Conns = 4
		}
	}
	if cfg.Conns < 0 || cfg.Conns > 10_000 {
		return nil, fmt.Errorf("conns: must be between 1 and 10000, got %d", cfg.Conns)
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = 2 * time.Second
	}
	if cfg.Rule == "" {
		cfg.Rule = "bench"
	}
	if strings.ContainsAny(cfg.Rule, "\"\\") {
		return nil, errors.New("rule: must not contain quotes or backslashes")
	}
	if cfg.Hits == 0 {
		cfg.Hits = 1
	}
	if cfg.Hits < 0 {
		return nil, fmt.Errorf("hits: must be ≥ 0, got %d", cfg.Hits)
	}
	if cfg.AuthHeader == "" {
		cfg.AuthHeader = "X-Bench-Key"
	}
	d := &httpDriver{cfg: cfg, hits: strconv.AppendInt(nil, cfg.Hits, 10)}
	if cfg.Kind == Raw {
		if cfg.Method == "" {
			cfg.Method = "POST"
		}
		if cfg.URL == "" || cfg.URL[0] != '/' {
			return nil, fmt.Errorf("url: want a path starting with /, got %q", cfg.URL)
		}
		if cfg.Success == 0 {
			cfg.Success = 200
		}
		if cfg.Deny == 0 {
			cfg.Deny = 429
		}
		if cfg.Success == cfg.Deny {
			return nil, errors.New("deny: must differ from success")
		}
		for _, h := range cfg.Headers {
			name, val, ok := strings.Cut(h, ":")
			if !ok || strings.TrimSpace(name) == "" {
				return nil, fmt.Errorf("header: want \"Name: value\", got %q", h)
			}
			d.headers = append(d.headers, [2]string{strings.TrimSpace(name), strings.TrimSpace(val)})
		}
		d.urlParts = splitTemplate(cfg.URL)
		d.bodyPart = splitTemplate(cfg.Body)
		d.cfg = cfg
	}
	if cfg.Kind == Pipelined {
		d.pipe = &fasthttp.PipelineClient{
			Addr:               cfg.Addr,
			MaxConns:           cfg.Conns,
			MaxPendingRequests: 100_000,
			// Idle pipelines close soon after a run: PipelineClient has no
			// Close of its own.
			MaxIdleConnDuration: time.Second,
			Logger:              quietLogger{},
			ReadBufferSize:      64 << 10,
			WriteBufferSize:     64 << 10,
		}
		d.doer = d.pipe
	} else {
		d.host = &fasthttp.HostClient{
			Addr:            cfg.Addr,
			MaxConns:        cfg.Conns,
			ReadBufferSize:  64 << 10,
			WriteBufferSize: 64 << 10,
			ReadTimeout:     cfg.Timeout,
			WriteTimeout:    cfg.Timeout,
			// More workers than connections wait for a free one rather
			// than fail (and spin) with ErrNoFreeConns.
			MaxConnWaitTimeout: cfg.Timeout,
		}
		d.doer = d.host
	}
	return d, nil
}

func splitTemplate(t string) [][]byte {
	var out [][]byte
	for _, p := range strings.Split(t, KeyPlaceholder) {
		out = append(out, []byte(p))
	}
	return out
}

func appendTemplate(dst []byte, parts [][]byte, key []byte) []byte {
	for i, p := range parts {
		if i > 0 {
			dst = append(dst, key...)
		}
		dst = append(dst, p...)
	}
	return dst
}

func (d *httpDriver) Name() string { return d.cfg.Kind.String() }

func (d *httpDriver) Close() error {
	d.once.Do(func() {
		if d.host != nil {
			d.host.CloseIdleConnections()
		}
	})
	return nil
}

func (d *httpDriver) NewSession() (Session, error) {
	s := &httpSession{d: d, req: new(fasthttp.Request), resp: new(fasthttp.Response)}
	base := "http://" + d.cfg.Addr
	switch d.cfg.Kind {
	case Single, Pipelined:
		s.req.Header.SetMethod("POST")
		s.req.SetRequestURI(base + "/v1/check")
		s.req.Header.SetContentType("application/json")
	case Batch:
		s.req.Header.SetMethod("POST")
		s.req.SetRequestURI(base + "/v1/checks")
		s.req.Header.SetContentType("application/json")
	case ForwardAuth:
		s.req.Header.SetMethod("GET")
		s.req.SetRequestURI(base + "/v1/auth")
		s.req.Header.Set("X-Forwarded-Method", "GET")
		s.req.Header.Set("X-Forwarded-Uri", "/api/bench")
	case Raw:
		s.req.Header.SetMethod(d.cfg.Method)
		for _, h := range d.headers {
			s.req.Header.Set(h[0], h[1])
		}
	}
	return s, nil
}

type httpSession struct {
	d    *httpDriver
	req  *fasthttp.Request
	resp *fasthttp.Response
	buf  []byte
}

func (s *httpSession) Do(keys []int32, out []Outcome) error {
	d := s.d
	cfg := &d.cfg
	b := s.buf[:0]
	switch cfg.Kind {
	case Single, Pipelined:
		b = appendCheck(b, cfg.Rule, cfg.Keys[keys[0]], d.hits)
		s.req.SetBody(b)
	case Batch:
		b = append(b, `{"checks":[`...)
		for i, k := range keys {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendCheck(b, cfg.Rule, cfg.Keys[k], d.hits)
		}
		b = append(b, "]}"...)
		s.req.SetBody(b)
	case ForwardAuth:
		s.req.Header.SetBytesV(cfg.AuthHeader, cfg.Keys[keys[0]])
	case Raw:
		key := cfg.Keys[keys[0]]
		b = append(b, "http://"...)
		b = append(b, cfg.Addr...)
		b = appendTemplate(b, d.urlParts, key)
		s.req.SetRequestURIBytes(b)
		b = appendTemplate(b[:0], d.bodyPart, key)
		if len(b) > 0 {
			s.req.SetBody(b)
		}
	}
	s.buf = b
	for i := range out {
		out[i] = Failed
	}
	err := d.doer.DoDeadline(s.req, s.resp, time.Now().Add(cfg.Timeout))
	if err != nil {
		if errors.Is(err, fasthttp.ErrTimeout) || errors.Is(err, fasthttp.ErrPipelineOverflow) {
			// The request may still be referenced by the client: never
			// reuse it.
			s.req = cloneRequest(s.req)
			s.resp = new(fasthttp.Response)
		}
		return err
	}
	code := s.resp.StatusCode()
	switch cfg.Kind {
	case Batch:
		if code != fasthttp.StatusOK {
			return badStatus(code, s.resp.Body())
		}
		n, err := ScanResults(s.resp.Body(), out)
		if err != nil {
			return err
		}
		if n != len(keys) {
			return fmt.Errorf("%w: %d results for %d checks", ErrBadResponse, n, len(keys))
		}
		return nil
	case Raw:
		switch code {
		case cfg.Success:
			out[0] = Allowed
		case cfg.Deny:
			out[0] = Denied
		default:
			return badStatus(code, s.resp.Body())
		}
		return nil
	default:
		switch code {
		case fasthttp.StatusOK:
			out[0] = Allowed
		case fasthttp.StatusTooManyRequests:
			out[0] = Denied
		default:
			return badStatus(code, s.resp.Body())
		}
		if cfg.Kind != ForwardAuth && bytes.Contains(s.resp.Body(), degradedTrue) {
			out[0] = out[0].degrade()
		}
		return nil
	}
}

var degradedTrue = []byte(`"degraded":true`)

func cloneRequest(r *fasthttp.Request) *fasthttp.Request {
	n := new(fasthttp.Request)
	r.CopyTo(n)
	return n
}

func badStatus(code int, body []byte) error {
	if len(body) > 200 {
		body = body[:200]
	}
	return fmt.Errorf("%w: status %d: %s", ErrBadResponse, code, bytes.TrimSpace(body))
}

// appendCheck appends {"rule":R,"key":K,"hits":H}. Keys are the bench's
// own (prefix + index) and rule names are validated, so no escaping is
// needed.
func appendCheck(b []byte, rule string, key, hits []byte) []byte {
	b = append(b, `{"rule":"`...)
	b = append(b, rule...)
	b = append(b, `","key":"`...)
	b = append(b, key...)
	b = append(b, `","hits":`...)
	b = append(b, hits...)
	return append(b, '}')
}

// quietLogger drops fasthttp's client logs: failures are counted and the
// first one is reported with the run.
type quietLogger struct{}

func (quietLogger) Printf(string, ...any) {}
