package forward

import (
	"strings"
	"testing"

	"github.com/valyala/fasthttp"

	"github.com/sluicehq/sluice/shard"
)

// post sends body to the handler at s with the auth header value auth
// ("" leaves it out) and returns the status and body.
func post(t *testing.T, addr, method, auth string, body []byte) (int, []byte) {
	t.Helper()
	req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.SetRequestURI("http://" + addr + Path)
	req.Header.SetMethod(method)
	if auth != "" {
		req.Header.Set(AuthHeader, auth)
	}
	req.SetBody(body)
	if err := fasthttp.Do(req, resp); err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode(), append([]byte(nil), resp.Body()...)
}

func TestHandlerRefuses(t *testing.T) {
	s := startServer(t, NewHandler(HandlerConfig{MaxItems: 2}, &echoDecider{}))
	three, _ := AppendBatch(nil, make3())
	tests := []struct {
		name, method string
		body         []byte
		status       int
		msg          string
	}{
		{"GET", "GET", nil, 405, "method"},
		{"empty body", "POST", nil, 400, "version"},
		{"bad key", "POST", rawBatch(1, rawItem(1, "r", "", 1)), 400, "item 0: key"},
		{"too many items", "POST", three, 413, "items"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status, body := post(t, s.addr, tt.method, "", tt.body)
			if status != tt.status || !strings.Contains(string(body), tt.msg) {
				t.Errorf("got %d %q, want %d naming %q", status, body, tt.status, tt.msg)
			}
		})
	}
}

func make3() []Item {
	return []Item{
		{Op: OpCheck, Rule: "r", Key: "k1", Hits: 1},
		{Op: OpCheck, Rule: "r", Key: "k2", Hits: 1},
		{Op: OpCheck, Rule: "r", Key: "k3", Hits: 1},
	}
}

// badPlans returns a plan that cannot be encoded.
type badPlans struct{ echoDecider }

func (d *badPlans) DecideBatch(items []Item, results []Result) []shard.Plan {
	d.echoDecider.DecideBatch(items, results)
	return []shard.Plan{{Key: ""}}
}

func TestHandlerDropsPlansItCannotEncode(t *testing.T) {
	s := startServer(t, NewHandler(HandlerConfig{}, &badPlans{}))
	body, _ := AppendBatch(nil, make3())
	status, got := post(t, s.addr, "POST", "", body)
	if status != 200 {
		t.Fatalf("status %d %s", status, got)
	}
	rs, ps, err := DecodeReply(nil, nil, got)
	if err != nil || len(rs) != 3 || len(ps) != 0 {
		t.Errorf("reply %d results, %d plans, %v; want 3, 0, nil", len(rs), len(ps), err)
	}
}
