package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/node/api"
	"github.com/sluicehq/sluice/node/rules"
)

// Admin calls one node's admin API (rules, members, hot keys) and its
// check endpoint, for tools such as the sluice CLI and the dashboard's
// tests. Unlike Client it talks to the one address it is given, over
// net/http, and is not built for the hot path. An Admin is safe for
// concurrent use.
//
// Errors: an answer other than 2xx (or 429 for Check) is an *AdminError
// carrying the status and the node's {"error","field"}.
type Admin struct {
	base  string // http://host:port, no trailing slash
	token string
	actor string
	hc    *http.Client
}

// AdminConfig configures an Admin. The zero value of each field but Addr
// means the default given in its comment.
type AdminConfig struct {
	// Addr is the node: "http://host:port", "https://host:port" or
	// "host:port".
	Addr string
	// Token is sent as "Authorization: Bearer <Token>"; empty sends none
	// (a node without an admin token accepts loopback callers).
	Token string
	// Actor names the caller in the node's change log (X-Sluice-Actor),
	// such as "alice@laptop". Empty sends none.
	Actor string
	// Timeout bounds each request. Zero means 10s.
	Timeout time.Duration
	// Logger receives the warning that Token is sent over plain http://
	// to an address that is not loopback. Nil means slog.Default().
	Logger *slog.Logger
}

// NewAdmin returns an Admin for cfg.Addr.
func NewAdmin(cfg AdminConfig) (*Admin, error) {
	addr := strings.TrimSuffix(strings.TrimSpace(cfg.Addr), "/")
	if addr == "" {
		return nil, configError("Addr", "required")
	}
	if !strings.Contains(addr, "://") {
		addr = "http://" + addr
	}
	u, err := url.Parse(addr)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || (u.Path != "" && u.Path != "/") {
		return nil, configError("Addr", strconv.Quote(cfg.Addr)+" is not http://host:port")
	}
	if cfg.Timeout < 0 {
		return nil, configError("Timeout", "must not be negative")
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = 10 * time.Second
	}
	if cfg.Token != "" && u.Scheme == "http" {
		if cfg.Logger == nil {
			cfg.Logger = slog.Default()
		}
		(&plainWarner{log: cfg.Logger, token: "admin token"}).check(u.Host)
	}
	return &Admin{base: u.Scheme + "://" + u.Host, token: cfg.Token, actor: cfg.Actor,
		hc: &http.Client{Timeout: cfg.Timeout}}, nil
}

// Addr returns the node's address as a calls it: "http://host:port" or
// "https://host:port".
func (a *Admin) Addr() string { return a.base }

// AdminError is a node's error answer.
type AdminError struct {
	Status int
	Msg    string
	Field  string
}

func (e *AdminError) Error() string {
	msg := e.Msg
	if msg == "" {
		msg = http.StatusText(e.Status)
	}
	if e.Field != "" && !strings.Contains(msg, e.Field) {
		msg = e.Field + ": " + msg
	}
	return fmt.Sprintf("%s (HTTP %d)", msg, e.Status)
}

// Is makes a 401 or 403 answer ErrTokenRefused.
func (e *AdminError) Is(target error) bool { return target == ErrTokenRefused && tokenStatus(e.Status) }

// RuleSet is GET /v1/rules: the installed rules, each as the JSON of a
// rule (the rule file's fields), in order.
type RuleSet struct {
	Version uint64            `json:"version"`
	Source  string            `json:"source"`
	File    string            `json:"file,omitempty"`
	Rules   []json.RawMessage `json:"rules"`
	// Algorithms are the algorithms a rule may name on the node (nil
	// from a node that does not say).
	Algorithms []rules.Algorithm `json:"algorithms,omitempty"`
}

// Change is the answer of a rules write or dry run: the rule names added,
// removed and changed (same name, new meaning), and the versions.
type Change struct {
	Version         uint64   `json:"version"`
	PreviousVersion uint64   `json:"previous_version"`
	DryRun          bool     `json:"dry_run"`
	Added           []string `json:"added"`
	Removed         []string `json:"removed"`
	Changed         []string `json:"changed"`
}

// Empty reports whether c changes nothing.
func (c Change) Empty() bool { return len(c.Added)+len(c.Removed)+len(c.Changed) == 0 }

// WriteOptions qualify a rules write.
type WriteOptions struct {
	// IfMatch, when non-zero, makes the write fail (412) unless the
	// node's version is IfMatch.
	IfMatch uint64
	// DryRun validates and answers the change without writing it.
	DryRun bool
}

// TestRequest describes an original request for RulesTest, as a gateway
// would send it to forward-auth.
type TestRequest struct {
	Method  string            `json:"method,omitempty"`
	Path    string            `json:"path,omitempty"`
	Host    string            `json:"host,omitempty"`
	IP      string            `json:"ip,omitempty"`
	Headers map[string]string `json:"headers,omitempty"`
}

// TestMatch is one rule a tested request matches, with its counter key.
type TestMatch struct {
	Rule string `json:"rule"`
	Key  string `json:"key"`
}

// TestResult is the answer of RulesTest.
type TestResult struct {
	Version uint64      `json:"version"`
	Matches []TestMatch `json:"matches"`
}

// HotKey is one of a node's top keys in GET /v1/hotkeys.
type HotKey struct {
	Key     string   `json:"key"`
	Count   uint64   `json:"count"`
	Err     uint64   `json:"err"`
	Rate    float64  `json:"rate"`
	Split   bool     `json:"split"`
	Holders []string `json:"holders"`
}

// Split is one split hot key in GET /v1/hotkeys.
type Split struct {
	Key     string   `json:"key"`
	Holders []string `json:"holders"`
	Epoch   uint64   `json:"epoch"`
	Owner   string   `json:"owner"`
}

// HotKeys is GET /v1/hotkeys.
type HotKeys struct {
	Self     string   `json:"self"`
	NodeRate float64  `json:"node_rate"`
	Top      []HotKey `json:"top"`
	Splits   []Split  `json:"splits"`
}

// Rules returns the node's rules (GET /v1/rules).
func (a *Admin) Rules(ctx context.Context) (RuleSet, error) {
	var rs RuleSet
	_, err := a.call(ctx, http.MethodGet, "/v1/rules", nil, nil, &rs)
	return rs, err
}

// Rule returns one rule's JSON and the version it was read at.
func (a *Admin) Rule(ctx context.Context, name string) (json.RawMessage, uint64, error) {
	var r json.RawMessage
	h, err := a.call(ctx, http.MethodGet, "/v1/rules/"+url.PathEscape(name), nil, nil, &r)
	if err != nil {
		return nil, 0, err
	}
	return r, etagVersion(h), nil
}

// PutRule adds or replaces the rule name with rule (its JSON or YAML).
func (a *Admin) PutRule(ctx context.Context, name string, rule []byte, o WriteOptions) (Change, error) {
	var c Change
	_, err := a.call(ctx, http.MethodPut, "/v1/rules/"+url.PathEscape(name)+o.query(), &o, rule, &c)
	return c, err
}

// DeleteRule removes the rule name.
func (a *Admin) DeleteRule(ctx context.Context, name string, o WriteOptions) (Change, error) {
	var c Change
	_, err := a.call(ctx, http.MethodDelete, "/v1/rules/"+url.PathEscape(name)+o.query(), &o, nil, &c)
	return c, err
}

// ApplyRules replaces the whole rule set with a rule file (YAML, or JSON
// {"rules":[...]}), as one version.
func (a *Admin) ApplyRules(ctx context.Context, file []byte, o WriteOptions) (Change, error) {
	var c Change
	_, err := a.call(ctx, http.MethodPut, "/v1/rules"+o.query(), &o, file, &c)
	return c, err
}

// ValidateRules answers what ApplyRules(file) would change, writing
// nothing (POST /v1/rules:validate). Nodes whose rules come from a file
// answer it too.
func (a *Admin) ValidateRules(ctx context.Context, file []byte) (Change, error) {
	var c Change
	_, err := a.call(ctx, http.MethodPost, "/v1/rules:validate", nil, file, &c)
	return c, err
}

// TestRules answers which rules a request matches, and with which key.
func (a *Admin) TestRules(ctx context.Context, req TestRequest) (TestResult, error) {
	body, err := json.Marshal(req)
	if err != nil {
		return TestResult{}, err
	}
	var r TestResult
	_, err = a.call(ctx, http.MethodPost, "/v1/rules:test", nil, body, &r)
	return r, err
}

// Members returns the node's view of the cluster (GET /v1/members).
func (a *Admin) Members(ctx context.Context) (MembersResponse, error) {
	var raw json.RawMessage
	if _, err := a.call(ctx, http.MethodGet, "/v1/members", nil, nil, &raw); err != nil {
		return MembersResponse{}, err
	}
	return ParseMembers(raw)
}

// HotKeys returns the node's hot keys (GET /v1/hotkeys).
func (a *Admin) HotKeys(ctx context.Context) (HotKeys, error) {
	var h HotKeys
	_, err := a.call(ctx, http.MethodGet, "/v1/hotkeys", nil, nil, &h)
	return h, err
}

// Check sends one check to the node (POST /v1/check), which routes it to
// the key's owner. A denial is a result (Allowed false), not an error.
func (a *Admin) Check(ctx context.Context, rule, key string, hits int64) (api.CheckResult, error) {
	req := api.CheckRequest{Rule: rule, Key: key, Hits: hits, HitsSet: true}
	res, body, err := a.do(ctx, http.MethodPost, "/v1/check", nil, api.AppendCheckRequest(nil, &req))
	if err != nil {
		return api.CheckResult{}, err
	}
	if res.StatusCode != http.StatusOK && res.StatusCode != http.StatusTooManyRequests {
		return api.CheckResult{}, adminError(res.StatusCode, body)
	}
	var r api.CheckResult
	if err := api.DecodeCheckResult(body, &r); err != nil {
		return api.CheckResult{}, fmt.Errorf("cannot parse the check result: %w", err)
	}
	return r, nil
}

func (o *WriteOptions) query() string {
	if o.DryRun {
		return "?dry_run=1"
	}
	return ""
}

// maxAdminBody bounds an admin answer.
const maxAdminBody = 64 << 20

// call sends a request and decodes a 2xx JSON answer into out.
func (a *Admin) call(ctx context.Context, method, path string, o *WriteOptions, body []byte, out any) (http.Header, error) {
	var hdr map[string]string
	if o != nil && o.IfMatch != 0 {
		hdr = map[string]string{"If-Match": `"` + strconv.FormatUint(o.IfMatch, 10) + `"`}
	}
	res, b, err := a.do(ctx, method, path, hdr, body)
	if err != nil {
		return nil, err
	}
	if res.StatusCode/100 != 2 {
		return res.Header, adminError(res.StatusCode, b)
	}
	if err := json.Unmarshal(b, out); err != nil {
		return res.Header, fmt.Errorf("cannot parse the answer of %s %s: %w", method, path, err)
	}
	return res.Header, nil
}

func (a *Admin) do(ctx context.Context, method, path string, hdr map[string]string, body []byte) (*http.Response, []byte, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, a.base+path, rd)
	if err != nil {
		return nil, nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if a.token != "" {
		req.Header.Set("Authorization", "Bearer "+a.token)
	}
	if a.actor != "" {
		req.Header.Set("X-Sluice-Actor", a.actor)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	res, err := a.hc.Do(req)
	if err != nil {
		return nil, nil, fmt.Errorf("cannot reach %s: %w", a.base, unwrapURLError(err))
	}
	defer res.Body.Close()
	b, err := io.ReadAll(io.LimitReader(res.Body, maxAdminBody))
	if err != nil {
		return nil, nil, fmt.Errorf("cannot read the answer of %s: %w", a.base, err)
	}
	return res, b, nil
}

// unwrapURLError drops net/http's "Get \"url\":" prefix (the caller
// names the node already).
func unwrapURLError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

func adminError(status int, body []byte) error {
	e := &AdminError{Status: status}
	var eb struct {
		Error string `json:"error"`
		Field string `json:"field"`
	}
	if json.Unmarshal(body, &eb) == nil {
		e.Msg, e.Field = eb.Error, eb.Field
	} else {
		e.Msg = strings.TrimSpace(string(body))
		if len(e.Msg) > 200 {
			e.Msg = e.Msg[:200]
		}
	}
	return e
}

// etagVersion reads a version ETag ("3").
func etagVersion(h http.Header) uint64 {
	v, _ := strconv.ParseUint(strings.Trim(strings.TrimPrefix(h.Get("ETag"), "W/"), `"`), 10, 64)
	return v
}
